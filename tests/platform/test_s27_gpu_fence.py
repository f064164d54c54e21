"""An admin fences one GPU (session 27, an admin's trial): the GPU page was read-only and a heartbeat sent with an
admin token marking the GPU unhealthy lasted until the agent's next heartbeat (NVML: healthy), while its side effect
(a job requeued) stayed. Now POST /api/v1/nodes/<name>/gpus/<index>/fence/ {"reason"} and .../unfence/
(services.nodes.set_gpu_fence): an override on the Gpu row that heartbeats never clear; the GPU shows unhealthy with
the reason, is not offered to new jobs, and a job running on it keeps it (as on a cordoned node)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Gpu, Job, Node
from gpuplatform.scheduling import store
from gpuplatform.scheduling.failures import detect_failures
from gpuplatform.scheduling.tasks import run_scheduling_cycle
from gpuplatform.services.nodes import set_gpu_fence
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
URL = "/api/v1/nodes/n0/gpus/{}/{}/"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def admin(cluster, django_user_model):
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def gpu_json(response, index: int) -> dict:
    return next(g for g in response.json()["gpus"] if g["index"] == index)


def heartbeat(client, **gpu3) -> None:
    r = client.post("/api/v1/nodes/n0/heartbeat/", {"gpus": [{"index": 3, **gpu3}]}, format="json")
    assert r.status_code == 200, r.content


def test_fence_holds_against_heartbeats_and_unfence_restores_the_agents_last_report(admin):
    r = admin.post(URL.format(3, "fence"), {"reason": "flapping ECC"}, format="json")
    assert r.status_code == 200, r.content
    assert gpu_json(r, 3).items() >= {"health": "unhealthy", "health_reason": "flapping ECC", "fenced": True}.items()
    assert gpu_json(r, 2)["fenced"] is False and gpu_json(r, 2)["health"] == "healthy"
    (event,) = Event.objects.filter(kind="gpu_fenced")
    assert event.actor.username == "boss" and event.node.name == "n0" and event.data["index"] == 3
    assert "n0/gpu3: fenced by boss (flapping ECC)" in event.message
    assert Node.objects.get(name="n0").state == "ready"  # one GPU, not the node

    heartbeat(admin, health="healthy")  # the agent's NVML view: healthy; the fence holds
    r = admin.get("/api/v1/nodes/n0/")
    assert gpu_json(r, 3).items() >= {"health": "unhealthy", "health_reason": "flapping ECC", "fenced": True}.items()
    heartbeat(admin, health="unhealthy", health_reason="XID 79")  # still recorded as the agent's view
    assert Gpu.objects.filter(node__name="n0", index=3, health="unhealthy", health_reason="XID 79").exists()
    r = admin.get("/api/v1/nodes/n0/")
    assert gpu_json(r, 3)["health_reason"] == "flapping ECC"  # the fence's reason is what shows

    heartbeat(admin, health="healthy")
    r = admin.post(URL.format(3, "unfence"), {}, format="json")
    assert r.status_code == 200, r.content
    assert gpu_json(r, 3).items() >= {"health": "healthy", "health_reason": "", "fenced": False}.items()
    (event,) = Event.objects.filter(kind="gpu_unfenced")
    assert event.actor.username == "boss" and "health as its agent last reported: healthy" in event.message
    # unfencing an unfenced GPU changes nothing and records nothing
    assert admin.post(URL.format(3, "unfence"), {}, format="json").status_code == 200
    assert Event.objects.filter(kind="gpu_unfenced").count() == 1


def test_unfence_returns_to_an_unhealthy_agent_report(admin):
    admin.post(URL.format(3, "fence"), {"reason": "fan"}, format="json")
    heartbeat(admin, health="unhealthy", health_reason="XID 48")
    r = admin.post(URL.format(3, "unfence"), {"reason": "fan replaced"}, format="json")
    assert gpu_json(r, 3).items() >= {"health": "unhealthy", "health_reason": "XID 48", "fenced": False}.items()


def test_a_fenced_gpu_is_not_offered_to_new_jobs(submit):
    for name in ("n1", "n2", "n3"):
        services.cordon_node(Node.objects.get(name=name))
    n0 = Node.objects.get(name="n0")
    for index in range(7):
        set_gpu_fence(n0, index, True, reason="bad batch")
    snap, _ = store.build_snapshot(now=at(0).timestamp())
    assert set(next(n for n in snap.nodes if n.name == "n0").unhealthy) == set(range(7))
    job = submit("one", tasks=1, gpus=1)
    assert run_scheduling_cycle(clock=at(0).isoformat())["binds"] == 1
    assert list(Allocation.objects.filter(job=job).values_list("gpu__index", flat=True)) == [7]
    set_gpu_fence(n0, 7, True, reason="bad batch")
    other = submit("two", tasks=1, gpus=1)
    services.record_heartbeat("n0", gpus=[{"index": i, "health": "healthy"} for i in range(8)], at=at(5))
    run_scheduling_cycle(clock=at(10).isoformat())
    assert Job.objects.get(pk=other.pk).state == "pending"
    assert not Allocation.objects.filter(job=other).exists()
    set_gpu_fence(n0, 2, False)  # unfenced: offered again
    assert run_scheduling_cycle(clock=at(20).isoformat())["binds"] == 1
    assert list(Allocation.objects.filter(job=other).values_list("gpu__index", flat=True)) == [2]


def test_a_job_running_on_a_fenced_gpu_keeps_it(submit):
    job = submit("runner", tasks=1, gpus=2)
    store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, "n0", (0, 1)),),
                                                     "nvl-a1", 1)]), clock=at(0), cycle_number=1)
    assert Job.objects.get(pk=job.pk).state == "running"
    set_gpu_fence(Node.objects.get(name="n0"), 0, True, reason="fan")
    detect_failures(at(1))
    for seconds in (5, 10):
        services.record_heartbeat("n0", gpus=[{"index": 0, "health": "healthy"}], at=at(seconds))
        detect_failures(at(seconds))  # what requeued the job after the trial's admin heartbeat
        run_scheduling_cycle(clock=at(seconds).isoformat())
    assert Job.objects.get(pk=job.pk).state == "running"
    assert Allocation.objects.filter(job=job, gpu__index=0, released_at__isnull=True).exists()
    assert not Event.objects.filter(job=job, kind__in=("requeued", "failed", "evicted")).exists()


def test_refusals(admin, django_user_model):
    user = django_user_model.objects.create_user("ann", password="pw")
    plain = APIClient()
    plain.force_authenticate(user)
    assert plain.post(URL.format(3, "fence"), {"reason": "x"}, format="json").status_code == 403
    assert plain.post(URL.format(3, "unfence"), {}, format="json").status_code == 403
    assert admin.post("/api/v1/nodes/nope/gpus/3/fence/", {"reason": "x"}, format="json").status_code == 404
    for index in (8, 64, 999999):
        assert admin.post(URL.format(index, "fence"), {"reason": "x"}, format="json").status_code == 404
        assert admin.post(URL.format(index, "unfence"), {}, format="json").status_code == 404
    for body in ({}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 201}, {"reason": ["a"]}):
        r = admin.post(URL.format(3, "fence"), body, format="json")
        assert r.status_code == 400 and list(r.json()) == ["reason"], (body, r.content)
    assert not Gpu.objects.filter(fenced=True).exists()
    assert not Event.objects.filter(kind__in=("gpu_fenced", "gpu_unfenced")).exists()
