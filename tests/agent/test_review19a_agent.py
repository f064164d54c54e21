"""Review 19a (agent side): one rule for "register again before this heartbeat" in both agent loops
(client.needs_registration; AgentLoop.registered derived from registered_gpus), and a lost GPU logged when it becomes
lost and when NVML reads it again, not at every read (every heartbeat)."""
from __future__ import annotations

import logging

import pytest

from gpuplatform.agent import client, runner
from gpuplatform.agent.client import AgentError, needs_registration, run_agent
from gpuplatform.agent.inventory import GpuInventory, NvmlReader
from gpuplatform.agent.runner import AgentLoop
from tests.agent.test_trialfix18e import LOST, N, FailingNVML, _dump


def _gpus(*uuids: str) -> list[GpuInventory]:
    return [GpuInventory(index=i, model="NVIDIA H100", memory_mib=81559, uuid=u, pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                         numa_node=0) for i, u in enumerate(uuids)]


class Calls:
    """post_json / get_json stand-ins: record (kind, body) for register and heartbeat; answer 404 when told to."""

    def __init__(self):
        self.made: list[tuple[str, dict]] = []
        self.fail_with: int | None = None

    def post(self, url, token, body, *, timeout=10.0):
        kind = "register" if url.endswith("/register/") else url.rstrip("/").rsplit("/", 1)[-1]
        if self.fail_with is not None:
            raise AgentError(f"POST {url}: HTTP {self.fail_with}", self.fail_with)
        self.made.append((kind, body))
        return {}

    def get(self, url, token, *, timeout=10.0):
        if self.fail_with is not None:
            raise AgentError(f"GET {url}: HTTP {self.fail_with}", self.fail_with)
        return {"tasks": []}

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.made]


@pytest.fixture
def calls(monkeypatch):
    c = Calls()
    for module in (client, runner):
        monkeypatch.setattr(module, "post_json", c.post)
    monkeypatch.setattr(runner, "get_json", c.get)
    return c


class _NoExecutor:
    def recover(self):
        return []

    def poll(self):
        pass

    def live_keys(self):
        return []

    def unreported(self):
        return []

    def pending_logs(self):
        return []

    def next_deadline(self):
        return None


def _reads(*inventories):
    """A `read` that answers each inventory in turn, then the last one again."""
    seq = list(inventories)

    def read():
        return seq.pop(0) if len(seq) > 1 else seq[0]
    return read


# -------------------------------------------------------------------------------------------- one rule, two loops
def test_needs_registration_is_the_one_rule():
    a, b = _gpus("GPU-a", "GPU-b"), _gpus("GPU-b")
    assert needs_registration(None, a) is True  # none yet
    assert needs_registration(client.gpu_identity(a), a) is False
    assert needs_registration(client.gpu_identity(a), b) is True  # one gone: renumbered
    assert needs_registration(client.gpu_identity(a), list(reversed(_gpus("GPU-b", "GPU-a")))) is True


@pytest.mark.parametrize("loop", ["run_agent", "AgentLoop"])
def test_both_loops_ask_needs_registration_and_warn_once_per_change(loop, calls, monkeypatch, caplog):
    asked = []
    real = client.needs_registration

    def spy(registered, gpus):
        asked.append(registered)
        return real(registered, gpus)

    monkeypatch.setattr(client, "needs_registration", spy)
    monkeypatch.setattr(runner, "needs_registration", spy)
    two, one = _gpus("GPU-a", "GPU-b"), _gpus("GPU-b")
    read = _reads(two, two, one, one)
    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    if loop == "run_agent":
        run_agent("http://cp", "tok", "n1", read, max_beats=4, sleep=lambda s: None, resources=(1000, 1024))
    else:
        agent = AgentLoop("http://cp", "tok", "n1", read, _NoExecutor(), resources=(1000, 1024), sleep=lambda s: None)
        agent.register()
        for _ in range(3):
            agent.heartbeat()
    assert asked, "the loop decides through client.needs_registration"
    kinds = calls.kinds()
    assert kinds.count("register") == 2 and kinds.count("heartbeat") == (4 if loop == "run_agent" else 3)
    # registered again before the first heartbeat of the new numbering, never between heartbeats of the same one
    second = [i for i, k in enumerate(kinds) if k == "register"][1]
    assert [g["uuid"] for g in calls.made[second][1]["gpus"]] == ["GPU-b"]
    assert kinds[second + 1] == "heartbeat"
    assert calls.made[second + 1][1]["gpus"][0]["index"] == 0
    warned = [r.getMessage() for r in caplog.records if "GPU inventory changed" in r.getMessage()]
    assert warned == ["GPU inventory changed (2 -> 1 GPU(s) or renumbered): registering again"]


def test_agent_loop_registered_is_derived_from_registered_gpus(calls):
    agent = AgentLoop("http://cp", "tok", "n1", lambda: _gpus("GPU-a"), _NoExecutor(), resources=(1000, 1024),
                      sleep=lambda s: None)
    assert agent.registered is False and agent.registered_gpus is None
    agent.register()
    assert agent.registered is True and agent.registered_gpus == ((0, "GPU-a"),)
    with pytest.raises(AttributeError):  # one field: `registered` cannot disagree with registered_gpus
        agent.registered = False
    calls.fail_with = 404  # the control plane forgot the node: register again
    agent.sync()
    assert agent.registered is False and agent.registered_gpus is None
    calls.fail_with = None
    agent.run(max_cycles=1)
    assert agent.registered is True and calls.kinds().count("register") == 2


def test_agent_loop_heartbeat_before_any_registration_does_not_register(calls):
    """As before: heartbeat() alone (not registered) sends the heartbeat only; run() registers first."""
    agent = AgentLoop("http://cp", "tok", "n1", lambda: _gpus("GPU-a"), _NoExecutor(), resources=(1000, 1024),
                      sleep=lambda s: None)
    agent.heartbeat()
    assert calls.kinds() == ["heartbeat"] and not agent.registered


# ---------------------------------------------------------------------------------------- a lost GPU, logged once
def _lost_lines(caplog) -> list[tuple[str, str]]:
    out = [(r.levelname, r.getMessage()) for r in caplog.records
           if r.name == "gpuplatform.agent" and r.getMessage().startswith("GPU ")]
    caplog.clear()
    return out


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName", "*"])
def test_a_lost_gpu_is_logged_when_lost_and_when_back_not_at_every_read(call, caplog):
    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    nvml = FailingNVML(_dump())
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    reader()
    assert _lost_lines(caplog) == []
    nvml.fail(call, 2)
    for _ in range(5):
        gpus = reader()
        assert gpus[2].health == "unhealthy" and LOST in gpus[2].health_reason  # reported unhealthy at every read
    lines = _lost_lines(caplog)
    assert len(lines) == 1, lines
    level, text = lines[0]
    assert level == "WARNING" and text.startswith("GPU 2 (GPU-18e") and LOST in text and "reported unhealthy" in text
    nvml.failing.clear()
    for _ in range(3):
        assert reader()[2].health == "healthy"
    assert _lost_lines(caplog) == [("INFO", "GPU 2 (GPU-18e00000-0000-0000-0000-000000000002): NVML reads it again")]
    nvml.fail(call, 2)  # lost again: logged again, once
    reader()
    reader()
    assert [level for level, _ in _lost_lines(caplog)] == ["WARNING"]


def test_a_gpu_never_identified_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    nvml = FailingNVML(_dump())
    nvml.fail("nvmlDeviceGetUUID", 3)
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    for _ in range(4):
        assert [g.index for g in reader()] == [i for i in range(N) if i != 3]
    lines = _lost_lines(caplog)
    assert len(lines) == 1 and lines[0][0] == "WARNING" and "never identified" in lines[0][1], lines
    nvml.failing.clear()
    assert len(reader()) == N
    assert _lost_lines(caplog) == [("INFO", "GPU 3 (GPU-18e00000-0000-0000-0000-000000000003): NVML reads it again")]


def test_a_lost_gpu_through_the_agent_loop_warns_once_over_many_heartbeats(calls, caplog):
    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    nvml = FailingNVML(_dump())
    agent = AgentLoop("http://cp", "tok", "n1", NvmlReader(nvml, sysfs_root="/nonexistent"), _NoExecutor(),
                      resources=(1000, 1024), sleep=lambda s: None)
    agent.register()
    nvml.fail("*", 5)
    for _ in range(6):
        agent.heartbeat()
    beats = [body for kind, body in calls.made if kind == "heartbeat"]
    assert len(beats) == 6 and all(b["gpus"][5]["health"] == "unhealthy" for b in beats)
    assert len([1 for level, _ in _lost_lines(caplog) if level == "WARNING"]) == 1


def test_read_nvml_without_a_lost_set_logs_every_call(caplog):
    """A one-off read (no `lost` set to remember by) logs what it finds, every call, as before."""
    from gpuplatform.agent.inventory import read_nvml

    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    nvml = FailingNVML(_dump())
    known: dict = {}
    read_nvml(nvml, sysfs_root="/nonexistent", known=known)
    nvml.fail("nvmlDeviceGetName", 1)
    read_nvml(nvml, sysfs_root="/nonexistent", known=known)
    read_nvml(nvml, sysfs_root="/nonexistent", known=known)
    assert [level for level, _ in _lost_lines(caplog)] == ["WARNING", "WARNING"]


def test_a_lost_gpu_nvml_stops_listing_is_logged_once_as_gone(caplog):
    caplog.set_level(logging.INFO, logger="gpuplatform.agent")
    nvml = FailingNVML(_dump())
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    reader()
    nvml.fail("*", N - 1)
    reader()
    assert [level for level, _ in _lost_lines(caplog)] == ["WARNING"]
    nvml.dump["gpus"].pop()  # NVML no longer counts it
    assert len(reader()) == N - 1 and len(reader()) == N - 1
    assert _lost_lines(caplog) == [("INFO", f"GPU GPU-18e00000-0000-0000-0000-00000000000{N - 1}: no longer in NVML's "
                                            f"list (reported lost until now)")]
