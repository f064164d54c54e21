"""Trial 18e: one GPU NVML cannot read any more (fallen off the bus, XID 79: NVML_ERROR_GPU_IS_LOST on its calls while
the driver is still loaded) no longer silences its node. Every call about one GPU is guarded (agent/inventory.py
read_nvml, agent/telemetry.py NvmlSampler): that GPU is reported unhealthy, with the NVML error in its health reason, as
last read at its index (left out when never identified); a metric that fails on one GPU is absent; heartbeats and
registration go on for the other GPUs, so the node stays ready and only the job on the lost GPU is requeued. NVML as a
whole gone still fails the read. And validation no longer counts a GPU row the registration keeps for its history
(Gpu.out_of_service "not_reported") as a GPU not reported."""
from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from urllib.parse import urlparse

import pytest

from gpuplatform.agent.client import AgentError, heartbeat_body, register_body
from gpuplatform.agent.inventory import InventoryError, NvmlReader, read_nvml
from gpuplatform.agent.telemetry import NvmlSampler
from tests.agent.fake_nvml import FakeNVML, NVMLError
from tests.api.conftest import cluster, users  # noqa: F401 - the API test world (4 x 8 H100, queues, users)

CLOCK = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
N = 8
LOST = "NVML_ERROR_GPU_IS_LOST"


def _dump(base: dict | None = None, n: int = N) -> dict:
    """The recorded H200 node's dump as a node of `n` GPUs (distinct UUIDs and PCI bus ids), model "NVIDIA H100"
    (the test cluster's flavor), each GPU's NVLink 0 active to the next GPU (so the NVLink calls are made)."""
    dump = copy.deepcopy(base or FakeNVML().dump)
    first = dump["gpus"][0]
    gpus = []
    for i in range(n):
        g = copy.deepcopy(first)
        g.update(index=i, name="NVIDIA H100", uuid=f"GPU-18e00000-0000-0000-0000-00000000000{i}",
                 pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                 nvlinks=[{"link": 0, "state": 1, "remote_pci_bus_id": f"00000000:{(i + 1) % n + 1:02X}:00.0"},
                          {"link": 1, "error": "NVMLError_NotSupported"}])
        if "mig_devices" in g:
            for j, m in enumerate(g["mig_devices"]):
                m["uuid"] = f"MIG-18e{i}{j}"
        gpus.append(g)
    dump["gpus"] = gpus
    return dump


class FailingNVML(FakeNVML):
    """FakeNVML that makes chosen calls about chosen GPUs raise: `fail(call, gpu, error)` (call "*": every call about
    that GPU). A MIG device's handle ("mig", gpu, j) is about its GPU; nvmlDeviceGetHandleByIndex(i) about GPU i."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.failing: dict[tuple[str, int], str] = {}

    def fail(self, call: str, gpu: int, error: str = LOST):
        self.failing[(call, gpu)] = error

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if not name.startswith("nvmlDevice") or name == "nvmlDeviceGetCount" or not callable(attr):
            return attr
        failing = super().__getattribute__("failing")

        def call(*args):
            h = args[0] if args else None
            gpu = h[1] if isinstance(h, tuple) else h
            error = failing.get((name, gpu)) or failing.get(("*", gpu))
            if error:
                raise NVMLError(error)
            return attr(*args)
        return call


# every NVML call read_nvml makes about one (not MIG) GPU
DEVICE_CALLS = ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetNumaNodeId",
                "nvmlDeviceGetMigMode", "nvmlDeviceGetRetiredPages", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo",
                "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo"]
# ... and about a GPU in MIG mode and its MIG devices
MIG_CALLS = ["nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetAttributes",
             "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"]


def test_the_calls_listed_are_the_calls_read_nvml_makes():
    """The lists the tests below inject into are every per-GPU call a read makes (a call added later is tested)."""
    made = set()

    class Recording(FailingNVML):
        def __getattribute__(self, name):
            if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount":
                made.add(name)
            return super().__getattribute__(name)

    import json
    from pathlib import Path

    read_nvml(Recording(_dump()), sysfs_root="/nonexistent")
    mig = json.loads((Path(__file__).parent / "nvml_mig_enabled_handmade.json").read_text())
    read_nvml(Recording(_dump(mig, n=2)), sysfs_root="/nonexistent")
    assert made == set(DEVICE_CALLS) | set(MIG_CALLS)


@pytest.mark.parametrize("call", DEVICE_CALLS)
def test_a_gpu_lost_on_any_call_is_reported_unhealthy_and_the_others_are_read(call):
    nvml = FailingNVML(_dump())
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    before = reader()
    assert [g.health for g in before] == ["healthy"] * N and all(g.nvlink_peers for g in before)
    nvml.fail(call, 2)
    after = reader()
    assert [g.index for g in after] == list(range(N))
    lost = after[2]
    assert lost.health == "unhealthy"
    assert lost.health_reason.startswith("NVML cannot read this GPU")
    assert LOST in lost.health_reason and call in lost.health_reason
    # its identity and topology are as last read (the server's rows, the topology audit and the NVML numbering hold)
    for key in ("uuid", "model", "memory_mib", "pci_bus_id", "numa_node", "mig_mode", "nvlink_peers"):
        assert getattr(lost, key) == getattr(before[2], key), key
    assert [g.to_dict() for i, g in enumerate(after) if i != 2] == [g.to_dict() for i, g in enumerate(before) if i != 2]
    # still lost at the next read; readable again: healthy
    assert reader()[2].health == "unhealthy"
    nvml.failing.clear()
    assert reader()[2].to_dict() == before[2].to_dict()


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID"])
def test_a_gpu_never_identified_is_left_out(call):
    nvml = FailingNVML(_dump())
    nvml.fail(call, 3)
    gpus = read_nvml(nvml, sysfs_root="/nonexistent")  # no earlier read: no UUID to name it by
    assert [g.index for g in gpus] == [0, 1, 2, 4, 5, 6, 7] and all(g.health == "healthy" for g in gpus)
    # and a body that leaves it out still registers the node's model
    body = register_body("n0", gpus)
    assert body["flavor"] == "H100" and body["labels"]["nvidia.com/gpu.count"] == "7"


@pytest.mark.parametrize("call", ["nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages", "nvmlDeviceGetNumaNodeId",
                                  "nvmlDeviceGetMigMode", "nvmlDeviceGetNvLinkState"])
def test_a_metric_one_gpu_does_not_support_is_absent(call):
    nvml = FailingNVML(_dump())
    nvml.fail(call, 1, "NVMLError_NotSupported")
    gpus = read_nvml(nvml, sysfs_root="/nonexistent")
    assert [g.health for g in gpus] == ["healthy"] * N
    one = gpus[1]
    absent = {"nvmlDeviceGetTotalEccErrors": one.ecc_uncorrected_volatile,
              "nvmlDeviceGetRetiredPages": one.retired_pages_dbe, "nvmlDeviceGetNumaNodeId": one.numa_node,
              "nvmlDeviceGetMigMode": one.mig_mode,
              "nvmlDeviceGetNvLinkState": one.nvlink_peers or None}[call]
    assert absent is None
    assert gpus[0].ecc_uncorrected_volatile == 0 and gpus[0].mig_mode == "disabled" and gpus[0].nvlink_peers


def test_a_gpu_whose_name_and_memory_never_read_still_registers():
    """A GPU lost before its first full read (UUID read, the rest GPU_IS_LOST): reported unhealthy with what NVML gave;
    the node's model comes from a GPU that has one; memory unknown is null (the platform keeps what it has)."""
    nvml = FailingNVML(_dump())
    for call in ("nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPciInfo"):
        nvml.fail(call, 0)
    gpus = read_nvml(nvml, sysfs_root="/nonexistent")
    assert (gpus[0].health, gpus[0].model, gpus[0].memory_mib, gpus[0].pci_bus_id) == ("unhealthy", "", None, "")
    body = register_body("n0", gpus)
    assert body["flavor"] == "H100" and body["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100"
    assert body["labels"]["nvidia.com/gpu.memory"] == str(gpus[1].memory_mib)


@pytest.mark.parametrize("call", ["nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetTotalEccErrors"])
def test_nvml_gone_as_a_whole_still_fails_the_read(call):
    nvml = FailingNVML(_dump())
    nvml.fail(call, 4, "NVML_ERROR_DRIVER_NOT_LOADED")
    with pytest.raises(InventoryError, match="NVML went away"):
        read_nvml(nvml, sysfs_root="/nonexistent")
    nvml = FailingNVML(_dump())
    nvml.lose_driver()
    with pytest.raises(InventoryError, match="nvmlDeviceGetCount failed"):
        read_nvml(nvml, sysfs_root="/nonexistent")


def test_real_nvml_error_codes_are_told_apart():
    """nvidia-ml-py's errors carry their code (`value`): GPU_IS_LOST (15) is the GPU, DRIVER_NOT_LOADED (9) NVML."""
    pynvml = pytest.importorskip("pynvml")

    lost, gone = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    nvml = FailingNVML(_dump())
    nvml.NVMLError = (pynvml.NVMLError, NVMLError)  # the fake's own errors (not supported) and nvidia-ml-py's
    nvml.NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST  # nvml.h's names, as the module has them
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    reader()
    real = nvml.nvmlDeviceGetPciInfo

    def pci(h):
        if h == 5:
            raise lost
        return real(h)
    nvml.nvmlDeviceGetPciInfo = pci
    gpus = reader()
    assert gpus[5].health == "unhealthy" and "NVML_ERROR_GPU_IS_LOST" in gpus[5].health_reason
    assert [g.health for i, g in enumerate(gpus) if i != 5] == ["healthy"] * (N - 1)

    def gone_pci(h):
        raise gone
    nvml.nvmlDeviceGetPciInfo = gone_pci
    with pytest.raises(InventoryError):
        reader()


@pytest.mark.parametrize("call", MIG_CALLS + ["nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName"])
def test_a_lost_gpu_in_mig_mode_keeps_its_mig_layout(call):
    """GPU_IS_LOST on a MIG device's call (or the GPU's) makes the GPU unhealthy; its MIG layout is as last read (not
    a layout changed under a job: the server would hold it for that instead)."""
    import json
    from pathlib import Path

    mig = json.loads((Path(__file__).parent / "nvml_mig_enabled_handmade.json").read_text())
    nvml = FailingNVML(_dump(mig, n=2))
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    before = reader()
    assert before[1].mig_mode == "enabled" and len(before[1].mig) == 4
    nvml.fail(call, 1)
    after = reader()
    assert after[1].health == "unhealthy" and call in after[1].health_reason
    assert (after[1].mig_mode, after[1].mig, after[1].uuid) == (before[1].mig_mode, before[1].mig, before[1].uuid)
    assert after[0].to_dict() == before[0].to_dict()


def test_telemetry_samples_the_other_gpus_of_a_node_with_a_lost_one():
    """The sampler took every handle at once: one lost GPU's handle failing left the whole node without telemetry."""
    nvml = FailingNVML(_dump())
    nvml.fail("nvmlDeviceGetHandleByIndex", 6)
    sampler = NvmlSampler(nvml, clock=lambda: 1.0)
    rows, _ = sampler.sample()
    assert sorted(r[1] for r in rows) == [0, 1, 2, 3, 4, 5, 7]
    nvml.failing.clear()
    nvml.fail("*", 2)  # a GPU lost after its handle was taken: answers nothing, so no row (never zeros)
    rows, _ = sampler.sample()
    assert sorted(r[1] for r in rows) == [0, 1, 3, 4, 5, 6, 7]


# ------------------------------------------------------------------------------------------------- against the server
@pytest.fixture
def _fast(settings):
    """Cheap passwords, fresh throttle counters (as tests/api/conftest.py does for its tests)."""
    from django.core.cache import cache

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


def _agent_loop(monkeypatch, reader, token_user):
    """A runner.AgentLoop for node n0 whose HTTP calls go to the API through the test client."""
    from rest_framework.test import APIClient

    from gpuplatform.agent import runner
    from gpuplatform.services import issue_api_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(token_user)[0]}")

    def post_json(url, token, body, *, timeout=10.0):
        r = client.post(urlparse(url).path, body, format="json")
        if r.status_code >= 300:
            raise AgentError(f"POST {url}: HTTP {r.status_code} {r.content[:300]!r}", r.status_code)
        return r.json()

    monkeypatch.setattr(runner, "post_json", post_json)
    return runner.AgentLoop("http://testserver", "unused", "n0", reader, executor=None, resources=(64000, 512000))


@pytest.fixture
def n0_with_two_jobs(_fast, cluster, users, monkeypatch):
    """Node n0 registered by its agent (8 GPUs through FailingNVML), the other nodes cordoned, and two one-GPU jobs
    bound on n0: (nvml, loop, {job: its GPU index})."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Node, Queue
    from gpuplatform.scheduling import store

    nvml = FailingNVML(_dump())
    loop = _agent_loop(monkeypatch, NvmlReader(nvml, sysfs_root="/nonexistent"), users["agent"])
    loop.register()
    for other in Node.objects.exclude(name="n0"):
        services.cordon_node(other, reason="this test's jobs go to n0")
    jobs = [services.submit_job(command=["sleep", "3600"], team=Queue.objects.get(name="alpha").team, queue="alpha",
                                name=f"job-{k}", roles=[{"tasks": 1, "gpus_per_task": 1}], submitter=users["member"],
                                submitted_at=CLOCK) for k in range(2)]
    store.run_cycle_once(clock=CLOCK)
    on = {job.pk: Allocation.objects.get(task__job=job, released_at__isnull=True).gpu.index for job in jobs}
    assert len(set(on.values())) == 2
    return nvml, loop, on


@pytest.mark.parametrize("call", DEVICE_CALLS)
def test_a_lost_gpu_fails_only_its_job_and_the_node_stays_ready(n0_with_two_jobs, call):
    """GPU_IS_LOST on one GPU for `call`: the agent's heartbeat still goes out (before, the read raised: no heartbeat,
    the node went not_ready and failed, and both jobs were requeued for a lost node); that GPU turns unhealthy, the
    job on it is requeued for its GPU, the job on another GPU runs on, and the agent can register again."""
    from django.utils import timezone as djtz

    from gpuplatform.models import Allocation, Event, Gpu, Job, Node
    from gpuplatform.scheduling.failures import detect_failures

    nvml, loop, on = n0_with_two_jobs
    (kept, k_gpu), (hit, h_gpu) = sorted(on.items())
    nvml.fail(call, h_gpu)
    # the node was silent long enough to fail, were this heartbeat not sent (the run loop's own catch-all)
    Node.objects.filter(name="n0").update(last_heartbeat=djtz.now() - timedelta(days=1))
    try:
        loop.heartbeat()
    except Exception as exc:  # noqa: BLE001 - as AgentLoop.run: the heartbeat failed
        loop._call_failed("heartbeat", exc)
    detect_failures(djtz.now())
    node = Node.objects.get(name="n0")
    assert node.state == "ready"
    gpu = Gpu.objects.get(node=node, index=h_gpu)
    assert gpu.health == "unhealthy" and LOST in gpu.health_reason and call in gpu.health_reason
    assert Gpu.objects.filter(node=node).exclude(index=h_gpu).filter(health="unhealthy").count() == 0
    causes = {e.job_id: e.data["cause"] for e in Event.objects.filter(kind="requeued_after_failure")}
    assert causes == {hit: f"GPU failed ({gpu.health_reason})"}  # the agent's reason names the call and the error
    assert Allocation.objects.filter(task__job_id=kept, released_at__isnull=True, gpu__index=k_gpu).exists()
    assert not Allocation.objects.filter(task__job_id=hit, released_at__isnull=True).exists()
    assert Job.objects.get(pk=kept).state not in ("pending", "failed")
    # the agent registers again (a restart, a 404): accepted, the lost GPU at its index, still unhealthy
    loop.register()
    gpu.refresh_from_db()
    assert (gpu.index, gpu.health, gpu.out_of_service) == (h_gpu, "unhealthy", "")
    assert Node.objects.get(name="n0").gpu_count == N


# ------------------------------------------------------------------------------------------------- validation
def test_validation_does_not_count_a_gpu_kept_as_not_reported_as_missing(_fast, cluster, users, monkeypatch):
    """A node whose registration keeps a GPU row for its history (gone from NVML, Gpu.out_of_service "not_reported")
    could never pass validation: "GPUs not reported: [7]" at every heartbeat. It passes now; a GPU the platform
    expects (not held out of service) that a heartbeat leaves out still fails it."""
    from gpuplatform import services
    from gpuplatform.diagnosis.health import start_repair, start_validation, validation_check
    from gpuplatform.models import Gpu, Node

    nvml = FailingNVML(_dump())
    reader = NvmlReader(nvml, sysfs_root="/nonexistent")
    loop = _agent_loop(monkeypatch, reader, users["agent"])
    loop.register()
    # GPU 7 ran a task once (a history), then fell off the bus for good: NVML lists 7 GPUs; the agent registers them
    from tests.api.test_trialfix18b import _run_one_on

    job, held = _run_one_on("n0", users, gpus=N)
    services.finish_job(job)  # its GPUs released: a node goes into repair only once no job holds them (s27)
    gone = copy.deepcopy(nvml.dump)
    gone["gpus"] = gone["gpus"][:N - 1]
    nvml.dump = gone
    loop.register()
    row = Gpu.objects.get(node__name="n0", index=N - 1)
    assert (row.health, row.out_of_service) == ("unhealthy", "not_reported")
    node = Node.objects.get(name="n0")
    services.cordon_node(node, reason="repair")
    start_repair(Node.objects.get(name="n0"))
    start_validation(Node.objects.get(name="n0"))
    beat = heartbeat_body(reader())
    check = validation_check(Node.objects.get(name="n0"), beat["gpus"])
    assert check == {"passed": True, "problems": []}, check
    loop.heartbeat()  # the heartbeat of a validating node without a check command is the check
    node = Node.objects.get(name="n0")
    assert node.state == "ready" and node.validation["passed"] is True, node.validation
    assert Gpu.objects.get(pk=row.pk).health == "unhealthy"  # still held out of service
    # a GPU the platform expects, not reported: still a problem
    check = validation_check(node, [g for g in beat["gpus"] if g["index"] != 3])
    assert not check["passed"] and "GPUs not reported: [3]" in check["problems"]
