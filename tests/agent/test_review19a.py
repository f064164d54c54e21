"""Review 19a (agent side): one rule for "register again before this heartbeat" in both agent loops
(client.needs_registration; AgentLoop.registered derived from registered_gpus)."""
from __future__ import annotations

import logging

import pytest

from gpuplatform.agent import client, runner
from gpuplatform.agent.client import AgentError, needs_registration, run_agent
from gpuplatform.agent.inventory import GpuInventory
from gpuplatform.agent.runner import AgentLoop


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
