"""A node's GPU rows follow the GPUs' UUIDs, not NVML's indices (trial-18c helper). NVML numbers the GPUs it sees
0..n-1, so a GPU fallen off the bus renumbers those after it: a node of 8 re-registers 7, the former GPU 3 now index
2. Registration matched rows by index: the dead GPU's row (its history, the job still on it) was rewritten with the
UUID of the GPU after it and looked healthy, the row of the last GPU was marked lost (its job requeued although its
GPU was fine) and two rows of the node could carry one UUID. Now a reported UUID is its row wherever its index
moved."""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

from tests.api.conftest import SLEEP

CLOCK = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def _uuids(node: str, n: int) -> list[str]:
    return [f"GPU-{node}-{i}" for i in range(n)]


def _listed(uuids: list[str], **extra) -> list[dict]:
    """The GPUs as NVML lists them: numbered 0..n-1 in order."""
    return [{"index": i, "uuid": u, **extra.get(u, {})} for i, u in enumerate(uuids)]


def _register(agent, name: str, gpus: list[dict]):
    r = agent.post("/api/v1/nodes/register/", {"name": name, "flavor": "H100", "gpus": gpus}, format="json")
    assert r.status_code in (200, 201), r.content
    return r.json()


def _only(node: str) -> None:
    from gpuplatform import services
    from gpuplatform.models import Node

    for other in Node.objects.exclude(name=node).filter(state="ready"):
        services.cordon_node(other, reason="this test's jobs go elsewhere")


def _submit(users, name: str, gpus: int = 1):
    from gpuplatform import services
    from gpuplatform.models import Queue

    return services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name=name,
                               roles=[{"tasks": 1, "gpus_per_task": gpus}], submitter=users["member"],
                               submitted_at=CLOCK)


def _no_uuid_twice(node: str) -> None:
    from gpuplatform.models import Gpu

    twice = [u for u, n in Counter(Gpu.objects.filter(node__name=node).exclude(uuid="")
                                   .values_list("uuid", flat=True)).items() if n > 1]
    assert twice == [], twice


def _two_jobs_then_one_gpu_falls_off(client_for, users):
    """n0 registered with 8 GPUs, jobs `dead` and `moved` of one GPU each on it; the GPU of `dead` (the lower index)
    falls off the bus and the node re-registers the 7 others as NVML numbers them. Returns (dead job, moved job,
    {uuid: row before}, dead uuid, moved uuid, the re-registration's answer, {job id: its allocation before})."""
    from gpuplatform import clock
    from gpuplatform.models import Allocation, Gpu
    from gpuplatform.scheduling import store

    agent = client_for("agent")
    uuids = _uuids("n0", 8)
    _register(agent, "n0", _listed(uuids))
    _only("n0")
    one, two = _submit(users, "first"), _submit(users, "second")
    store.run_cycle_once(clock=CLOCK)
    at = {job.pk: Allocation.objects.get(job=job, released_at__isnull=True).gpu.index for job in (one, two)}
    dead, moved = sorted((one, two), key=lambda job: at[job.pk])
    a, b = at[dead.pk], at[moved.pk]
    assert a < b
    # the dead GPU's own history: an XID the agent sent (telemetry, by index)
    t = clock.now().timestamp()
    assert agent.post("/api/v1/nodes/n0/telemetry/", {"interval": 10, "rows": [], "xids": [[t, a, 79]]},
                      format="json").status_code == 200
    before = {g.uuid: g for g in Gpu.objects.filter(node__name="n0")}
    holds = {job.pk: _allocation(job) for job in (dead, moved)}
    answer = _register(agent, "n0", _listed([u for u in uuids if u != uuids[a]]))
    return dead, moved, before, uuids[a], uuids[b], answer, holds


def _allocation(job) -> dict:
    from gpuplatform.models import Allocation

    return Allocation.objects.filter(job=job).values("pk", "gpu_id", "task_id", "released_at", "created_at").get()


def test_a_gpu_fallen_off_the_bus_renumbers_the_others_and_each_keeps_its_row(client_for, users):
    """8 -> 7 with a live job on the dead GPU and one on a GPU after it: the dead GPU's row keeps its UUID, history and
    job, is held out of service at a free index (7: no reported GPU uses it) and its job is requeued for it; the
    moved GPU's row takes its new index with its allocation untouched and its job runs on; the row of the last GPU is
    not taken for lost; no UUID is on two rows; the node_registered Event says which UUID moved where."""
    from gpuplatform.models import Allocation, Event, Gpu, GpuXid, Job
    from gpuplatform.scheduling import store
    from gpuplatform.scheduling.failures import detect_failures
    from gpuplatform.services.nodes import LOST_GPU_REASON

    dead, moved, before, dead_uuid, moved_uuid, answer, holds = _two_jobs_then_one_gpu_falls_off(client_for, users)
    a, b = before[dead_uuid].index, before[moved_uuid].index
    assert answer["gpu_count"] == 8
    rows = {g.uuid: g for g in Gpu.objects.filter(node__name="n0")}
    assert {u: g.pk for u, g in rows.items()} == {u: g.pk for u, g in before.items()}  # every GPU its own row
    _no_uuid_twice("n0")
    # every GPU still listed is at the index NVML gives it now, healthy and in service
    listed = [u for u in _uuids("n0", 8) if u != dead_uuid]
    assert [(rows[u].index, rows[u].health, rows[u].out_of_service) for u in listed] == [
        (i, "healthy", "") for i in range(7)]
    gone = rows[dead_uuid]
    assert (gone.index, gone.health, gone.out_of_service, gone.health_reason) == (
        7, "unhealthy", "not_reported", LOST_GPU_REASON)
    # the dead GPU's history stays on its row
    assert holds[dead.pk]["gpu_id"] == gone.pk and list(GpuXid.objects.filter(gpu__node__name="n0")
                                                        .values_list("gpu_id", "xid")) == [(gone.pk, 79)]
    # the moved GPU's allocation is the one it had (same row, same task, live)
    assert holds[moved.pk]["gpu_id"] == before[moved_uuid].pk and _allocation(moved) == holds[moved.pk]
    assert rows[moved_uuid].index == b - 1 and holds[moved.pk]["released_at"] is None
    event = Event.objects.filter(kind="node_registered").latest("id")
    assert event.data["lost_gpus"] == [7]
    renumbered = event.data["renumbered"]
    assert {"uuid": moved_uuid, "from": b, "to": b - 1} in renumbered
    assert {"uuid": dead_uuid, "from": a, "to": 7, "lost": True} in renumbered
    assert {r["uuid"] for r in renumbered} == {dead_uuid} | {u for u in listed if before[u].index > a}
    assert f"{moved_uuid} gpu{b} -> gpu{b - 1}" in event.message
    # failure detection: the job on the dead GPU is requeued for it, the other runs on
    detect_failures(CLOCK)
    requeued = Event.objects.filter(kind="requeued_after_failure", job=dead).latest("id")
    assert requeued.data["cause"] == f"GPU out of service: {LOST_GPU_REASON}"
    assert not Event.objects.filter(kind="requeued_after_failure", job=moved).exists()
    assert Job.objects.get(pk=moved.pk).state in Job.LIVE_STATES
    assert _allocation(moved) == holds[moved.pk]
    # the next cycles bind nothing on the dead GPU nor beside the running job on its GPU (at its new index)
    for _ in range(2):
        store.run_cycle_once(clock=CLOCK + timedelta(minutes=10))
    assert _allocation(moved) == holds[moved.pk]
    live = Allocation.objects.filter(gpu__node__name="n0", released_at__isnull=True)
    assert not live.filter(gpu=gone).exists() and live.filter(gpu=rows[moved_uuid]).count() == 1
    assert max(Counter(live.values_list("gpu_id", flat=True)).values()) == 1
    # the node re-registering as it is now changes nothing
    _register(client_for("agent"), "n0", _listed(listed))
    assert {g.uuid: (g.pk, g.index) for g in Gpu.objects.filter(node__name="n0")} == {
        u: (g.pk, g.index) for u, g in rows.items()}
    assert "renumbered" not in Event.objects.filter(kind="node_registered").latest("id").data


def test_after_a_renumbering_heartbeats_telemetry_and_assignments_address_the_same_gpus(client_for, users):
    """The agent addresses GPUs by NVML index in heartbeats and telemetry, by UUID in the tasks it starts
    (CUDA_VISIBLE_DEVICES). After the renumbering, a heartbeat or a telemetry row for index i lands on the GPU NVML
    now numbers i, and the running task's assignment still names its own GPU (UUID), at its new index."""
    from gpuplatform import clock, services
    from gpuplatform.models import Gpu, GpuSample

    dead, moved, before, dead_uuid, moved_uuid, _, _ = _two_jobs_then_one_gpu_falls_off(client_for, users)
    agent = client_for("agent")
    b = before[moved_uuid].index
    row = Gpu.objects.get(node__name="n0", uuid=moved_uuid)
    answer = agent.get("/api/v1/nodes/n0/assignments/").json()
    (task,) = [t for t in answer["tasks"] if t["job_name"] == moved.name]
    assert task["action"] == "run" and task["gpus"] == [{"index": b - 1, "uuid": moved_uuid}]
    assert task["env"]["CUDA_VISIBLE_DEVICES"] == moved_uuid
    # telemetry for index b-1: the moved GPU's row, attributed to its job
    t = clock.now().timestamp()
    r = agent.post("/api/v1/nodes/n0/telemetry/", {"interval": 10, "rows": [[t, b - 1, 93, None, None, None, None,
                                                                              None, None, None]]}, format="json")
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.content
    assert list(GpuSample.objects.filter(sm=93).values_list("gpu_id", "job_id")) == [(row.pk, moved.pk)]
    # a heartbeat of the 7 GPUs, index b-1 unhealthy: that GPU, not the dead one nor the one before the renumbering
    beat = [{"index": i, "health": "healthy"} for i in range(7)]
    beat[b - 1] = {"index": b - 1, "health": "unhealthy", "health_reason": "XID 48"}
    r = agent.post("/api/v1/nodes/n0/heartbeat/", {"gpus": beat}, format="json")
    assert r.status_code == 200, r.content
    health = {g.uuid: (g.index, g.health) for g in Gpu.objects.filter(node__name="n0")}
    assert health[moved_uuid] == (b - 1, "unhealthy")
    assert [u for u, (_, h) in health.items() if h == "unhealthy"] == sorted([moved_uuid, dead_uuid],
                                                                             key=lambda u: health[u][0])
    # the dead GPU's row (index 7) stays out of service whatever a heartbeat says of index 7
    services.record_heartbeat("n0", gpus=[{"index": 7, "health": "healthy"}])
    assert Gpu.objects.get(uuid=dead_uuid).health == "unhealthy"


def test_after_a_renumbering_the_scheduler_places_on_the_seven_live_gpus_only(client_for, users):
    """The dead GPU's row is unhealthy at index 7 and nothing is placed on it: a 7-GPU job takes exactly the 7 rows of
    the GPUs the node still lists; an 8-GPU job waits."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job
    from gpuplatform.scheduling import store
    from gpuplatform.scheduling.failures import detect_failures

    dead, moved, _, dead_uuid, _, _, _ = _two_jobs_then_one_gpu_falls_off(client_for, users)
    detect_failures(CLOCK)
    for job in (dead, moved):
        services.cancel_job(Job.objects.get(pk=job.pk))
    store.run_cycle_once(clock=CLOCK)
    assert not Allocation.objects.filter(gpu__node__name="n0", released_at__isnull=True).exists()
    (info,) = [n for n in store.build_snapshot(CLOCK.timestamp())[0].nodes if n.name == "n0"]
    assert (info.gpus, info.unhealthy) == (8, frozenset({7}))
    seven, eight = _submit(users, "seven", 7), _submit(users, "eight", 8)
    store.run_cycle_once(clock=CLOCK)
    live = set(Gpu.objects.filter(node__name="n0").exclude(uuid=dead_uuid).values_list("pk", flat=True))
    assert len(live) == 7
    assert set(Allocation.objects.filter(job=seven, released_at__isnull=True).values_list("gpu_id", flat=True)) == live
    assert Job.objects.get(pk=eight.pk).state == Job.State.PENDING
    assert not Allocation.objects.filter(gpu__uuid=dead_uuid, job__in=[seven, eight]).exists()


def test_a_renumbered_gpu_keeps_its_mig_instances_and_sharing_mode(client_for, users):
    """A GPU's MIG instances and the sharing mode its admin chose are the GPU's: they follow it to its new index, and
    the GPU now at its old index keeps its own. Rows a client registered without UUIDs are matched by index as before
    (the first registration with UUIDs names them), then follow their UUIDs."""
    from gpuplatform import services
    from gpuplatform.models import Gpu, MigInstance, Node

    agent = client_for("agent")
    node = Node.objects.get(name="n1")
    rows = {g.index: g.pk for g in Gpu.objects.filter(node=node)}
    assert set(Gpu.objects.filter(node=node).values_list("uuid", flat=True)) == {""}  # loaded without UUIDs
    uuids = _uuids("n1", 8)
    inst = {"uuid": "MIG-n1-5-0", "profile": "3g.40gb", "memory_mib": 40_000, "slices": 3}
    mig = {uuids[5]: {"mig_mode": "enabled", "mig": [inst]}}
    _register(agent, "n1", _listed(uuids, **mig))
    assert {g.index: g.pk for g in Gpu.objects.filter(node=node)} == rows  # by index: the same rows, now named
    services.set_gpu_sharing(node, 3, "shared")
    instance = MigInstance.objects.get(uuid="MIG-n1-5-0")
    # GPU 1 falls off the bus: 2..7 become 1..6
    _register(agent, "n1", _listed([u for u in uuids if u != uuids[1]], **mig))
    now = {g.uuid: g for g in Gpu.objects.filter(node=node)}
    assert (now[uuids[5]].pk, now[uuids[5]].index, now[uuids[5]].sharing) == (rows[5], 4, "mig")
    assert MigInstance.objects.get(uuid="MIG-n1-5-0").gpu_id == instance.gpu_id == rows[5]
    assert (now[uuids[3]].pk, now[uuids[3]].index, now[uuids[3]].sharing) == (rows[3], 2, "shared")
    assert (now[uuids[6]].index, now[uuids[6]].sharing) == (5, "exclusive")
    assert now[uuids[4]].sharing == "exclusive" and uuids[1] not in now  # never ran anything: removed
    assert Node.objects.get(pk=node.pk).gpu_count == 7
    _no_uuid_twice("n1")


def test_a_gpu_replaced_in_its_slot_is_a_new_gpu_and_the_old_one_keeps_its_history(client_for, users):
    """A GPU swapped for another (an RMA) comes back at the same index with another UUID: that is a new GPU (a new
    row, no history), and the old GPU's row, which ran a task, is kept as lost at a free index with its history, not
    relabelled with the new UUID."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Event, Gpu
    from gpuplatform.scheduling import store

    agent = client_for("agent")
    uuids = _uuids("n0", 8)
    _register(agent, "n0", _listed(uuids))
    _only("n0")
    job = _submit(users, "before-the-swap")
    store.run_cycle_once(clock=CLOCK)
    old = Allocation.objects.get(job=job).gpu
    slot = old.index
    services.cancel_job(job)
    store.run_cycle_once(clock=CLOCK)
    swapped = list(uuids)
    swapped[slot] = "GPU-n0-new"
    answer = _register(agent, "n0", _listed(swapped))
    old.refresh_from_db()
    assert (old.uuid, old.index, old.health, old.out_of_service) == (uuids[slot], 8, "unhealthy", "not_reported")
    new = Gpu.objects.get(node__name="n0", uuid="GPU-n0-new")
    assert (new.index, new.health, new.out_of_service) == (slot, "healthy", "") and new.pk != old.pk
    assert not Allocation.objects.filter(gpu=new).exists() and Allocation.objects.filter(gpu=old, job=job).exists()
    assert answer["gpu_count"] == 9
    assert Event.objects.filter(kind="node_registered").latest("id").data["renumbered"] == [
        {"uuid": uuids[slot], "from": slot, "to": 8, "lost": True}]
    _no_uuid_twice("n0")


def test_an_agent_registers_again_before_a_heartbeat_under_a_new_gpu_numbering(client_for, users, monkeypatch):
    """The agent registers once, then sends heartbeats of the inventory it reads each time, GPUs named by NVML index.
    When NVML's numbering changes under a running agent (a GPU fallen off the bus, the driver reloaded), its next
    heartbeat named the GPUs by the new indices against rows still numbered the old way: the health of the former GPU
    3, now 2, landed on the dead GPU's row. Now the agent registers again first (the server moves each UUID to its
    new index), so the health lands on the GPU it is about; an unchanged inventory is not registered again."""
    from gpuplatform.agent import runner
    from gpuplatform.agent.client import AgentError
    from gpuplatform.agent.inventory import GpuInventory
    from gpuplatform.models import Event, Gpu

    agent = client_for("agent")

    def post(url, token, body, *, timeout=10.0):  # the agent's HTTP call, answered by this test's server
        r = agent.post(url.removeprefix("http://control-plane"), body, format="json")
        if r.status_code >= 300:
            raise AgentError(f"HTTP {r.status_code}: {r.content[:200]!r}", r.status_code)
        return r.json()

    monkeypatch.setattr(runner, "post_json", post)
    uuids = _uuids("n0", 8)
    gpus = [GpuInventory(index=i, model="NVIDIA H100", memory_mib=81559, uuid=u,
                         pci_bus_id=f"00000000:{i + 16:02X}:00.0") for i, u in enumerate(uuids)]
    seen = {"gpus": gpus}
    loop = runner.AgentLoop("http://control-plane", "token", "n0", lambda: seen["gpus"], None, resources=(64000, 1024))
    loop.register()
    loop.heartbeat()
    loop.heartbeat()
    assert Event.objects.filter(kind="node_registered", node__name="n0").count() == 1  # nothing changed: once
    # GPU 2 falls off the bus; NVML numbers the others 0..6, and the former GPU 3 (now 2) reports an XID
    after = [GpuInventory(**{**g.to_dict(), "index": i}) for i, g in enumerate(g for g in gpus if g.index != 2)]
    after[2].health, after[2].health_reason = "unhealthy", "XID 48 (double bit ECC)"
    seen["gpus"] = after
    loop.heartbeat()
    rows = {g.uuid: (g.index, g.health) for g in Gpu.objects.filter(node__name="n0")}
    assert rows == {**{u: (i, "healthy") for i, u in enumerate(u for u in uuids if u != uuids[2])},
                    uuids[3]: (2, "unhealthy")}  # the dead GPU 2 never ran anything: removed
    assert Event.objects.filter(kind="node_registered", node__name="n0").count() == 2
    loop.heartbeat()
    assert Event.objects.filter(kind="node_registered", node__name="n0").count() == 2


def test_gpus_held_for_a_pending_job_follow_the_renumbering(client_for, users):
    """Job.reserved names held GPUs by index. When GPUs 1 and 2 fall off the bus and NVML renumbers the others (the
    former GPUs 5 and 6 are now 3 and 4), a hold on them names 3 and 4, their new indices, not the GPUs that took 5 and
    6; a hold on GPU 2, kept on the node for its history and put aside at a free index, follows it there (a cycle
    drops it: that GPU is unhealthy); a hold on GPU 1, removed from the node, is dropped whole with a hold_dropped
    Event. Before, every hold kept its indices and pointed at other physical GPUs."""
    from gpuplatform.models import Allocation, Event, Gpu, Job, Task

    agent = client_for("agent")
    uuids = _uuids("n0", 8)
    _register(agent, "n0", _listed(uuids))
    _only("n0")
    follows, gone, kept = _submit(users, "follows", 1), _submit(users, "gone", 1), _submit(users, "kept", 1)
    Job.objects.filter(pk=follows.pk).update(reserved=[["worker", 0, "n0", [5, 6]]])
    Job.objects.filter(pk=gone.pk).update(reserved=[["worker", 0, "n0", [1]]])
    Job.objects.filter(pk=kept.pk).update(reserved=[["worker", 0, "n0", [2]]])
    ran = _submit(users, "ran-on-2", 1)  # GPU 2 ran a task once: its row is kept as lost
    Allocation.objects.create(task=Task.objects.filter(job=ran).first(), job=ran, created_at=CLOCK, released_at=CLOCK,
                              gpu=Gpu.objects.get(node__name="n0", uuid=uuids[2]))
    _register(agent, "n0", _listed([u for u in uuids if u not in (uuids[1], uuids[2])]))
    at = dict(Gpu.objects.filter(node__name="n0").values_list("uuid", "index"))
    assert (at[uuids[5]], at[uuids[6]]) == (3, 4) and uuids[1] not in at
    assert Job.objects.get(pk=follows.pk).reserved == [["worker", 0, "n0", [3, 4]]]
    assert Job.objects.get(pk=kept.pk).reserved == [["worker", 0, "n0", [at[uuids[2]]]]]
    assert Job.objects.get(pk=gone.pk).reserved is None
    assert list(Event.objects.filter(kind="hold_dropped").values_list("job__name", flat=True)) == ["gone"]
