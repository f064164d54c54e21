"""Node registration after trial 17c: a GPU held out of service by its node's registration is a field of the GPU
(Gpu.out_of_service), not the words of its health reason; a GPU kept as lost on one node moves to the node that
registers it (G14); the lost GPUs are marked in bulk."""
from __future__ import annotations

from datetime import datetime, timezone

from tests.api.conftest import SLEEP

CLOCK = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def _gpus(node: str, n: int, skip=()) -> list[dict]:
    return [{"index": i, "uuid": f"GPU-{node}-{i}"} for i in range(n) if i not in skip]


def _run_one_on(node: str, users, name: str = "on-node", gpus: int = 2):
    """A job of `gpus` GPUs bound on `node` (every other node cordoned), and the indices of the GPUs it holds."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Node, Queue
    from gpuplatform.scheduling import store

    for other in Node.objects.exclude(name=node).filter(state="ready"):
        services.cordon_node(other, reason="this test's jobs go elsewhere")
    job = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name=name,
                              roles=[{"tasks": 1, "gpus_per_task": gpus}], submitter=users["member"],
                              submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    held = sorted(Allocation.objects.filter(task__job=job, released_at__isnull=True).values_list("gpu__index",
                                                                                               flat=True))
    assert len(held) == gpus, held
    return job, held


def test_a_gpu_held_by_its_registration_is_a_field_not_the_words_of_its_reason(client_for, users):
    """A GPU the registration no longer lists is held out of service by a field (out_of_service "not_reported",
    shown with its health in the node API), which heartbeats and validation leave alone and a registration that lists
    it clears. The words alone no longer pin a GPU: an agent whose own health reason reads like the registration's
    (a GPU unhealthy for another cause) is healed by its next healthy heartbeat, and a job on such a GPU is requeued
    for a failed GPU, not 'GPU out of service' (both were read from the text before)."""
    from gpuplatform import services
    from gpuplatform.models import Event, Gpu, Job
    from gpuplatform.scheduling.failures import detect_failures
    from gpuplatform.services.nodes import LOST_GPU_REASON

    agent, staff = client_for("agent"), client_for("staff")
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8)},
                      format="json").status_code in (200, 201)
    r = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 7)},
                   format="json")
    assert r.status_code in (200, 201), r.content
    # GPU 7 never ran anything: removed. Give GPU 6 a history, then lose it
    job, held = _run_one_on("n0", users, gpus=1)
    lost = held[0]
    r = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100",
                                               "gpus": _gpus("n0", 7, skip={lost})}, format="json")
    assert r.status_code in (200, 201), r.content
    row = Gpu.objects.get(node__name="n0", index=lost)
    assert (row.health, row.out_of_service, row.health_reason) == ("unhealthy", "not_reported", LOST_GPU_REASON)
    shown = {g["index"]: g for g in staff.get("/api/v1/nodes/n0/").json()["gpus"]}
    assert shown[lost]["out_of_service"] == "not_reported" and shown[(lost + 1) % 7]["out_of_service"] == ""
    services.record_heartbeat("n0", gpus=[{"index": lost, "health": "healthy"}])
    assert Gpu.objects.get(pk=row.pk).health == "unhealthy"  # only a registration changes it
    detect_failures(CLOCK)
    cause = Event.objects.filter(kind="requeued_after_failure", job=job).latest("id").data["cause"]
    assert cause == f"GPU out of service: {LOST_GPU_REASON}"
    # the registration lists it again: healthy, the field cleared
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 7)},
                      format="json").status_code in (200, 201)
    row.refresh_from_db()
    assert (row.health, row.out_of_service, row.health_reason) == ("healthy", "", "")
    # the agent's own reason, in the registration's words: not a registration's hold
    services.cancel_job(job)
    other, on = _run_one_on("n0", users, name="second", gpus=1)
    services.record_heartbeat("n0", gpus=[{"index": on[0], "health": "unhealthy", "health_reason": LOST_GPU_REASON}])
    bad = Gpu.objects.get(node__name="n0", index=on[0])
    assert (bad.health, bad.out_of_service) == ("unhealthy", "")
    detect_failures(CLOCK)
    cause = Event.objects.filter(kind="requeued_after_failure", job=other).latest("id").data["cause"]
    assert cause == f"GPU failed ({LOST_GPU_REASON})"  # a fault the agent reported, in its words: not a hold
    services.record_heartbeat("n0", gpus=[{"index": on[0], "health": "healthy"}])
    assert Gpu.objects.get(pk=bad.pk).health == "healthy"  # was pinned unhealthy by its words


def test_a_passed_validation_leaves_a_gpu_the_registration_holds_out_of_service(client_for, users):
    """A validating node's check passing makes its GPUs healthy again, but not one its registration holds out of
    service (gone from the node): the scheduler would place on a GPU the node does not have."""
    from gpuplatform.diagnosis.health import record_validation
    from gpuplatform.models import Gpu, Node

    agent = client_for("agent")
    agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8)}, format="json")
    _, held = _run_one_on("n0", users, gpus=1)
    agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8, skip=set(held))},
               format="json")
    Gpu.objects.filter(node__name="n0", index=0 if held[0] else 1).update(health="unhealthy", health_reason="XID 79")
    Node.objects.filter(name="n0").update(state="validating")
    record_validation(Node.objects.get(name="n0"), passed=True, detail="check command passed")
    health = dict(Gpu.objects.filter(node__name="n0").values_list("index", "health"))
    assert health[held[0]] == "unhealthy" and list(health.values()).count("unhealthy") == 1


def test_migration_0028_marks_the_gpus_whose_reason_was_a_registrations(cluster):
    """Migration 0028's data step: the GPUs a registration had taken out of service before the field existed (their
    health reason said so) are marked; an agent's reason and a healthy GPU are left alone."""
    import importlib

    from django.apps import apps

    from gpuplatform.models import Gpu
    from gpuplatform.services.nodes import LOST_GPU_REASON, MIG_GONE_REASON, MIG_ON_REASON

    step = importlib.import_module("gpuplatform.migrations.0028_gpu_out_of_service").mark_registration_holds
    rows = {g.index: g for g in Gpu.objects.filter(node__name="n1")}
    reasons = {0: ("unhealthy", LOST_GPU_REASON), 1: ("unhealthy", f"{MIG_GONE_REASON}: MIG-1"[:200]),
               2: ("unhealthy", MIG_ON_REASON), 3: ("unhealthy", "XID 79"), 4: ("healthy", "")}
    for index, (health, reason) in reasons.items():
        Gpu.objects.filter(pk=rows[index].pk).update(health=health, health_reason=reason, out_of_service="")
    step(apps, None)
    marked = dict(Gpu.objects.filter(node__name="n1").values_list("index", "out_of_service"))
    assert [marked[i] for i in range(8)] == ["not_reported", "mig_changed", "mig_changed", "", "", "", "", ""]


def test_the_gpus_a_registration_no_longer_lists_are_marked_in_one_update(client_for, users):
    """_lost_gpus marked the GPUs it keeps one UPDATE each (a node losing many GPUs: as many queries); now one for
    them all, and none when they are already so marked (the node re-registering as it was)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuplatform.models import Event, Gpu

    agent = client_for("agent")
    agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8)}, format="json")
    _, held = _run_one_on("n0", users, gpus=4)

    def register():
        with CaptureQueriesContext(connection) as seen:
            r = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100",
                                                       "gpus": _gpus("n0", 8, skip=set(held))}, format="json")
        assert r.status_code in (200, 201), r.content
        return [q["sql"] for q in seen.captured_queries
                if q["sql"].startswith('UPDATE "gpuplatform_gpu"') and "not_reported" in q["sql"]]

    assert len(register()) == 1
    rows = Gpu.objects.filter(node__name="n0", index__in=held)
    assert {(g.health, g.out_of_service) for g in rows} == {("unhealthy", "not_reported")}
    assert Event.objects.filter(kind="node_registered").latest("id").data["lost_gpus"] == held
    assert register() == []  # already marked: no write
    assert Gpu.objects.filter(node__name="n0").count() == 8


def test_a_gpu_lost_on_one_node_moves_to_the_node_that_registers_it(client_for, users):
    """Trial 17c, G14: a GPU kept as lost on n0 (n0's registration no longer listed it; it ran a task) could not be
    registered by another node: the GPU was moved to n1 and n1's registration was refused for good ("uuid ... is GPU
    k of node n0"). Now, once no live allocation holds it, n1's registration takes the row over, with its history,
    healthy as n1 reports it (and exclusive again); a `gpu_moved` Event says from where; both nodes count their GPUs
    right and the scheduler places on it. While a task still holds it on n0, a 400 names gpus[i].uuid and why."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Event, Gpu, Job, Node, Queue
    from gpuplatform.scheduling import store
    from gpuplatform.scheduling.failures import detect_failures

    agent = client_for("agent")
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8)},
                      format="json").status_code in (200, 201)
    job, held = _run_one_on("n0", users, gpus=1)
    k = held[0]
    uuid = f"GPU-n0-{k}"
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8, skip={k})},
                      format="json").status_code in (200, 201)
    row = Gpu.objects.get(uuid=uuid)
    assert (row.node.name, row.out_of_service) == ("n0", "not_reported")
    to_n1 = {"name": "n1", "flavor": "H100", "gpus": _gpus("n1", 8) + [{"index": 8, "uuid": uuid}]}
    refused = agent.post("/api/v1/nodes/register/", to_n1, format="json")  # the job still holds it on n0
    assert refused.status_code == 400 and list(refused.json()) == ["gpus[8].uuid"], refused.content
    why = refused.json()["gpus[8].uuid"][0]
    assert "n0" in why and "on-node" in why and "live allocation" in why
    assert Gpu.objects.get(pk=row.pk).node.name == "n0" and Node.objects.get(name="n1").gpu_count == 8
    still = {**to_n1, "gpus": _gpus("n1", 8) + [{"index": 8, "uuid": f"GPU-n0-{(k + 1) % 8}"}]}
    refused = agent.post("/api/v1/nodes/register/", still, format="json")  # one n0 still lists: refused as before
    assert refused.status_code == 400 and "a GPU belongs to one node" in refused.json()["gpus[8].uuid"][0]
    detect_failures(CLOCK)  # the job is requeued off the lost GPU: its allocation released
    services.cancel_job(Job.objects.get(pk=job.pk))
    assert not Allocation.objects.filter(gpu=row, released_at__isnull=True).exists()
    services.set_gpu_sharing(row.node, k, "shared")  # n0's admin's choice: not carried to n1
    moved = agent.post("/api/v1/nodes/register/", to_n1, format="json")
    assert moved.status_code in (200, 201), moved.content
    row.refresh_from_db()
    assert (row.node.name, row.index, row.health, row.out_of_service, row.sharing) == ("n1", 8, "healthy", "",
                                                                                       "exclusive")
    assert list(Allocation.objects.filter(gpu=row).values_list("job_id", flat=True)) == [job.pk]  # its history
    event = Event.objects.filter(kind="gpu_moved").get()
    assert (event.node.name, event.data["from_node"], event.data["from_index"], event.data["to_index"]) == (
        "n1", "n0", k, 8) and "moved from n0" in event.message
    assert moved.json()["gpu_count"] == 9 and Gpu.objects.filter(node__name="n1").count() == 9
    assert Node.objects.get(name="n0").gpu_count == 7 == Gpu.objects.filter(node__name="n0").count()
    assert not Gpu.objects.filter(node__name="n0", uuid=uuid).exists()
    # n0 re-registers as it is: nothing more to keep; n1 re-registers as it is: the GPU stays
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8, skip={k})},
                      format="json").json()["gpu_count"] == 7
    assert agent.post("/api/v1/nodes/register/", to_n1, format="json").json()["gpu_count"] == 9
    # the scheduler places on it: a 9-GPU task fits n1 only with the moved GPU
    for node in Node.objects.exclude(name="n1"):
        if node.state == "ready":
            services.cordon_node(node)
    services.uncordon_node(Node.objects.get(name="n1"))
    nine = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="nine",
                               roles=[{"tasks": 1, "gpus_per_task": 9}], submitter=users["member"], submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    on = Allocation.objects.filter(job=nine, released_at__isnull=True)
    assert on.count() == 9 and on.filter(gpu=row).exists()


def test_a_moved_gpu_takes_its_slot_and_its_mig_instances_along(client_for, users):
    """The moved GPU lands at the index the new node reports it at: the GPU that was in that slot is then a GPU the
    registration no longer lists (kept unhealthy at a free index with its history, as _lost_gpus keeps any). A MIG
    instance of the moved GPU, listed under it, moves with it; one listed under another GPU is refused, naming it."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Event, Gpu, MigInstance, Node, Queue
    from gpuplatform.scheduling import store

    agent = client_for("agent")
    for name in ("n0", "n1"):
        agent.post("/api/v1/nodes/register/", {"name": name, "flavor": "H100", "gpus": _gpus(name, 8)}, format="json")
    for name in ("n2", "n3"):
        services.cordon_node(Node.objects.get(name=name))
    both = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="both",
                               roles=[{"tasks": 2, "gpus_per_task": 8}], submitter=users["member"], submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    assert Allocation.objects.filter(job=both).count() == 16  # every GPU of n0 and n1 has a history
    services.cancel_job(both)
    store.run_cycle_once(clock=CLOCK)
    assert not Allocation.objects.filter(job=both, released_at__isnull=True).exists()
    inst = {"uuid": "MIG-n0-5-0", "profile": "3g.40gb", "memory_mib": 40_000, "slices": 3}
    mig5 = {"index": 5, "uuid": "GPU-n0-5", "mig_mode": "enabled", "mig": [inst]}
    agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100",
                                           "gpus": [g if g["index"] != 5 else mig5 for g in _gpus("n0", 8)]},
               format="json")
    agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8, skip={5})},
               format="json")  # GPU 5 gone from n0, kept (history) with its instance
    row, instance = Gpu.objects.get(uuid="GPU-n0-5"), MigInstance.objects.get(uuid="MIG-n0-5-0")
    assert (row.node.name, row.out_of_service, row.sharing, instance.gpu_id) == ("n0", "not_reported", "mig", row.pk)
    n1 = _gpus("n1", 8)
    wrong = [{**g, "mig_mode": "enabled", "mig": [inst]} if g["index"] == 0 else g for g in n1]
    refused = agent.post("/api/v1/nodes/register/", {"name": "n1", "flavor": "H100", "gpus": wrong}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["gpus[0].mig[0].uuid"], refused.content
    old2 = Gpu.objects.get(uuid="GPU-n1-2")
    swapped = [mig5 if g["index"] == 2 else g for g in n1]
    swapped[2] = {**mig5, "index": 2}
    moved = agent.post("/api/v1/nodes/register/", {"name": "n1", "flavor": "H100", "gpus": swapped}, format="json")
    assert moved.status_code in (200, 201), moved.content
    row.refresh_from_db()
    old2.refresh_from_db()
    assert (row.node.name, row.index, row.health, row.sharing) == ("n1", 2, "healthy", "mig")
    assert MigInstance.objects.get(uuid="MIG-n0-5-0").pk == instance.pk and instance.pk in row.mig_instances.values_list(
        "pk", flat=True)
    assert (old2.node.name, old2.index, old2.health, old2.out_of_service) == ("n1", 8, "unhealthy", "not_reported")
    assert Allocation.objects.filter(gpu=old2).exists() and Allocation.objects.filter(gpu=row).exists()
    assert Event.objects.filter(kind="node_registered").latest("id").data["lost_gpus"] == [8]
    assert moved.json()["gpu_count"] == 9 and Node.objects.get(name="n0").gpu_count == 7


def test_a_node_whose_gpu_indices_have_a_gap_is_scheduled_on_its_real_gpus(client_for, users):
    """The engine numbers a node's GPUs 0..gpus-1. A registration listing indices 0-2 and 4-7 (seven GPUs, no GPU 3)
    made the snapshot offer GPU 3, which has no row, and hide GPU 7: a 7-GPU job was refused every cycle ('GPU n0/3 is
    unhealthy or unknown') and a 4-GPU one could be planned on the missing GPU. Now an index with no row is an
    unhealthy GPU of the snapshot and the highest row is seen: the job of seven starts on the seven real GPUs."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Job, Node, Queue
    from gpuplatform.scheduling import store

    agent = client_for("agent")
    r = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus("n0", 8, skip={3})},
                   format="json")
    assert r.status_code in (200, 201), r.content
    assert sorted(Node.objects.get(name="n0").gpus.values_list("index", flat=True)) == [0, 1, 2, 4, 5, 6, 7]
    (info,) = [n for n in store.build_snapshot(CLOCK.timestamp())[0].nodes if n.name == "n0"]
    assert (info.gpus, info.unhealthy) == (8, frozenset({3}))
    for other in Node.objects.exclude(name="n0").filter(state="ready"):
        services.cordon_node(other, reason="this test's jobs go elsewhere")
    job = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="seven",
                              roles=[{"tasks": 1, "gpus_per_task": 7}], submitter=users["member"], submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    job.refresh_from_db()
    assert job.state != Job.State.PENDING, job.pending_reason
    held = sorted(Allocation.objects.filter(task__job=job, released_at__isnull=True).values_list("gpu__index",
                                                                                               flat=True))
    assert held == [0, 1, 2, 4, 5, 6, 7]
