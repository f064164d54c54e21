"""Trial 18 (a break-it pass on session 18's registration changes): one GPU UUID claimed by two nodes at once
(finding 1, high: both answered 201 and a cycle bound a job on each node to that one GPU), a heartbeat's GPU named by
its UUID (finding 2: its health landed on the GPU now at its old index) and a registration entry without a UUID
(finding 6: it blanked the stored UUID, which another node could then claim)."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Gpu, MigInstance

pytestmark = pytest.mark.django_db


def _gpu(node: str, i: int, **extra) -> dict:
    return {"index": i, "uuid": f"GPU-{node}-{i}", **extra}


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_two_nodes_registering_one_new_gpu_uuid_at_once_one_is_refused():
    """The first registration holds the UUID's lock until it commits; the second waits, then reads its row and is a
    400 on gpus[0].uuid. Before, the check locked only rows already there: both inserted, both 201. Likewise a MIG
    instance's UUID (both were 201, and the first node's instance was silently taken)."""
    from tests.api.helpers_api import ordered

    shared = {"index": 0, "uuid": "GPU-shared-0"}
    out = ordered(lambda: services.register_node("na", flavor="H100", gpus=[shared]),
                  lambda: services.register_node("nb", flavor="H100", gpus=[shared]))
    assert out["waited"] and "first_error" not in out, out
    assert isinstance(out.get("error"), services.ValidationError), out
    assert "gpus[0].uuid" in out["error"].errors, out["error"].errors
    assert list(Gpu.objects.filter(uuid="GPU-shared-0").values_list("node__name", flat=True)) == ["na"]

    def mig(node):
        return [{"index": 0, "uuid": f"GPU-{node}-m", "mig_mode": "enabled", "mig": [
            {"uuid": "MIG-race-1", "profile": "1g.18gb", "memory_mib": 16384, "slices": 1}]}]
    out = ordered(lambda: services.register_node("ma", flavor="H100", gpus=mig("ma")),
                  lambda: services.register_node("mb", flavor="H100", gpus=mig("mb")))
    assert out["waited"] and "first_error" not in out, out
    assert isinstance(out.get("error"), services.ValidationError), out
    assert "gpus[0].mig[0].uuid" in out["error"].errors, out["error"].errors
    assert list(MigInstance.objects.filter(uuid="MIG-race-1").values_list("gpu__node__name", flat=True)) == ["ma"]


def test_a_heartbeat_names_its_gpus_by_uuid_wherever_the_server_holds_them():
    """The node was registered again (by another client) with GPUs 1 and 2 swapped since the agent's last view; its
    heartbeat says GPU-h-1 (its index 1) is unhealthy: the server marks GPU-h-1, now at index 2, not the GPU now at 1.
    A UUID the node does not hold is not applied."""
    services.register_node("h", flavor="H100", gpus=[_gpu("h", i) for i in range(4)])
    swapped = [_gpu("h", 0), {"index": 1, "uuid": "GPU-h-2"}, {"index": 2, "uuid": "GPU-h-1"}, _gpu("h", 3)]
    services.register_node("h", flavor="H100", gpus=swapped)
    services.record_heartbeat("h", gpus=[{"index": 1, "uuid": "GPU-h-1", "health": "unhealthy",
                                          "health_reason": "XID 79"},
                                         {"index": 3, "uuid": "GPU-elsewhere", "health": "unhealthy"}])
    health = dict(Gpu.objects.filter(node__name="h").values_list("uuid", "health"))
    assert health == {"GPU-h-0": "healthy", "GPU-h-1": "unhealthy", "GPU-h-2": "healthy", "GPU-h-3": "healthy"}
    # an entry without a UUID is still read by its index
    services.record_heartbeat("h", gpus=[{"index": 3, "health": "unhealthy", "health_reason": "by index"}])
    assert Gpu.objects.get(node__name="h", index=3).health == "unhealthy"


def test_a_registration_entry_without_a_uuid_keeps_the_stored_one():
    """Before, {"index": 0} with no UUID blanked GPU 0's stored UUID, and another node could then register it."""
    services.register_node("k", flavor="H100", gpus=[_gpu("k", 0), _gpu("k", 1)])
    services.register_node("k", flavor="H100", gpus=[{"index": 0}, _gpu("k", 1)])
    assert dict(Gpu.objects.filter(node__name="k").values_list("index", "uuid")) == {0: "GPU-k-0", 1: "GPU-k-1"}
    with pytest.raises(services.ValidationError) as err:
        services.register_node("k2", flavor="H100", gpus=[_gpu("k", 0)])
    assert "gpus[0].uuid" in err.value.errors


def test_a_gpu_index_past_the_highest_a_node_may_report_is_a_400(client_for):
    """NVML numbers a node's GPUs 0..count-1 and the engine sees a node's GPUs as 0..its highest index: index 32767 on a
    4-GPU node was accepted, the metrics read 'H100 x32768' and the engine walked 32,768 GPUs of that node."""
    from gpuplatform.services.nodes import MAX_GPU_INDEX

    agent = client_for("agent")
    gpus = [_gpu("big", i) for i in range(3)] + [_gpu("big", 32767)]
    r = agent.post("/api/v1/nodes/register/", {"name": "big", "flavor": "H100", "gpus": gpus}, format="json")
    assert r.status_code == 400 and "gpus[3].index" in r.json(), r.content
    with pytest.raises(services.ValidationError) as err:
        services.register_node("big", flavor="H100", gpus=[_gpu("big", MAX_GPU_INDEX + 1)])
    assert err.value.errors == {"gpus[0].index": f"index must be a distinct integer from 0 to {MAX_GPU_INDEX}"}
    services.register_node("big", flavor="H100", gpus=[_gpu("big", MAX_GPU_INDEX)])  # the highest is taken
