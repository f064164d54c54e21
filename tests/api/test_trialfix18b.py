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
    assert cause == "GPU failed (ECC / XID)"
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
