"""Fault and reclaim cases of ../shared/cases/ at the database level: services + node heartbeats +
gpuplatform.scheduling.failures.detect_failures + store.run_cycle_once with explicit clocks (restated from
node-notready-blip.yaml, node-drain-strands-gang.yaml, reclaim-needs-several-victims.yaml)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from django.db.models import Count

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec
from gpuplatform import services
from gpuplatform.models import Allocation, Event, Gpu, Job, Node, Queue, Team
from gpuplatform.scheduling import store
from gpuplatform.scheduling.failures import detect_failures
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

pytestmark = pytest.mark.django_db
T0 = datetime(2024, 5, 1, 8, 0, tzinfo=tz.utc)
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def load(nodes: list[str], queues: list[QueueSpec], gpus: int = 8) -> None:
    services.load_cluster_spec(ClusterSpec("case", nodes=tuple(NodeSpec(n, "H100", gpus) for n in nodes),
                                           queues=tuple(queues)))


def submit(name, queue, tasks=1, gpus=8, min_available=None, submit_at=0.0, **kw) -> Job:
    role = {"name": "worker", "tasks": tasks, "gpus_per_task": gpus, "min_available": min_available or tasks}
    return services.submit_job(command=SLEEP, team=Team.objects.get(name=queue), queue=queue, name=name, roles=[role],
                               submitted_at=at(submit_at), **kw)


def pin(job: Job, nodes: list, gpus: int = 8, clock: float = 0.0) -> None:
    """Start `job` with task i on nodes[i] (the case's `running:` section): a node name (its first `gpus`
    GPUs) or a (node, GPU indices) pair."""
    tasks = tuple(TaskPlacement("worker", i, *(n if isinstance(n, tuple) else (n, tuple(range(gpus)))))
                  for i, n in enumerate(nodes))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=at(clock),
                               cycle_number=1)
    assert stats.binds == 1


def heartbeat(name: str, t: float) -> None:
    services.record_heartbeat(name, gpus=[], at=at(t))


def live(job: Job) -> list[tuple[str, int]]:
    return sorted(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name", "gpu__index"))


def check_invariants() -> None:
    """No GPU counted twice, no node over its GPU count (its free GPUs never below 0)."""
    assert not (Allocation.objects.filter(released_at__isnull=True).values("gpu_id").annotate(n=Count("id"))
                .filter(n__gt=1).exists())
    for name, count in Node.objects.values_list("name", "gpu_count"):
        assert Allocation.objects.filter(released_at__isnull=True, gpu__node__name=name).count() <= count


def test_node_notready_blip_moves_nothing():
    """node-notready-blip.yaml: n1 is silent from 0 to 90 s (timeout 60 s, grace 120 s): not_ready from
    70 s to 90 s, ready after; j's placement never changes; k runs on n2 and is never offered n1."""
    load(["n1", "n2"], [QueueSpec("q", team="q", quotas={"H100": (0, 16, None)})])
    j = submit("j", "q")
    pin(j, ["n1"])
    allocations = list(Allocation.objects.filter(job=j).values_list("id", "gpu_id", "released_at"))
    states = {}
    for t in range(0, 201, 10):
        heartbeat("n2", t)
        if t == 0 or t >= 90:
            heartbeat("n1", t)
        if t == 30:
            k = submit("k", "q", submit_at=30)
        detect_failures(at(t))
        store.run_cycle_once(clock=at(t))
        check_invariants()
        states[t] = Node.objects.get(name="n1").state
        assert list(Allocation.objects.filter(job=j).values_list("id", "gpu_id", "released_at")) == allocations
        assert Job.objects.get(pk=j.pk).state == "running"
        if t >= 30:
            assert {n for n, _ in live(k)} <= {"n2"}
    assert [t for t, s in states.items() if s == "not_ready"] == [70, 80]
    assert all(s == "ready" for t, s in states.items() if t >= 90)
    j.refresh_from_db()
    assert (j.attempts, j.started_at) == (0, at(0)) and live(j) == [("n1", g) for g in range(8)]
    assert live(k) == [("n2", g) for g in range(8)] and Job.objects.get(pk=k.pk).started_at == at(30)
    n1_events = list(Event.objects.filter(node__name="n1", kind__in=("node_not_ready", "node_ready"))
                     .order_by("time").values_list("kind", "time"))
    assert n1_events == [("node_not_ready", at(70)), ("node_ready", at(90))]
    assert not Event.objects.filter(kind__in=("node_failed", "requeued_after_failure")).exists()


def test_node_lost_beyond_grace_requeues_the_gang_whole_and_it_restarts_on_healthy_nodes():
    """A 2-node gang loses n1 for good: at last heartbeat + 60 s + 120 s its tasks fail, the gang is requeued
    whole (every GPU released at once, original submit time, attempt counted, 60 s backoff) and restarts on
    the two healthy nodes; n1's GPUs are never counted twice."""
    load(["n1", "n2", "n3"], [QueueSpec("q", team="q", quotas={"H100": (0, 24, None)})])
    j = submit("j", "q", tasks=2, submit_at=-5)
    pin(j, ["n1", "n2"])
    for t in range(0, 301, 10):
        for n in ("n2", "n3") if t else ("n1", "n2", "n3"):
            heartbeat(n, t)
        detect_failures(at(t))
        store.run_cycle_once(clock=at(t))
        check_invariants()
        j.refresh_from_db()
        if t < 180:
            assert j.state == "running" and {n for n, _ in live(j)} == {"n1", "n2"}
        if t == 180:
            assert j.state == "pending" and live(j) == [] and j.attempts == 1 and j.not_before == at(240)
            assert set(Allocation.objects.filter(job=j).values_list("released_at", flat=True)) == {at(180)}
    assert Node.objects.get(name="n1").state == "not_ready"
    assert j.state == "running" and j.started_at == at(240) and j.submitted_at == at(-5)
    assert {n for n, _ in live(j)} == {"n2", "n3"}
    requeue = Event.objects.get(kind="requeued_after_failure", job=j)
    assert requeue.data["failed_tasks"] == [["worker", 0, "n1"]] and requeue.data["attempts"] == 1
    assert Event.objects.filter(kind="node_failed", node__name="n1").count() == 1


def test_gpu_ecc_error_fails_its_task_and_requeues_the_gang():
    """A fatal XID on GPU 5 under a running task (reported by the node's heartbeat) fails that task: the
    gang is requeued whole with backoff and restarts without GPU 5."""
    load(["n1", "n2"], [QueueSpec("q", team="q", quotas={"H100": (0, 16, None)})])
    j = submit("j", "q", tasks=2, gpus=4)
    pin(j, [("n1", (0, 1, 2, 3)), ("n1", (4, 5, 6, 7))])
    services.record_heartbeat("n1", gpus=[{"index": 5, "health": "unhealthy",
                                                "health_reason": "XID 79: GPU has fallen off the bus"}], at=at(10))
    report = detect_failures(at(11))
    assert report.requeued == [j.pk]
    j.refresh_from_db()
    assert j.state == "pending" and live(j) == [] and j.attempts == 1
    store.run_cycle_once(clock=j.not_before)
    assert Job.objects.get(pk=j.pk).state == "running"
    assert ("n1", 5) not in live(j)
    assert Gpu.objects.get(node__name="n1", index=5).health == "unhealthy"


def test_node_drain_requeues_the_stranded_gang_whole():
    """node-drain-strands-gang.yaml: draining n3 evicts j gracefully (30 s), then j is requeued whole at once,
    original submit time, attempt counted; it never holds 3 nodes idle; k (60 s) runs on freed GPUs and j
    restarts as soon as 4 nodes are free (k finishes at 200 s; n3 is uncordoned at 120 s)."""
    load(["n1", "n2", "n3", "n4"], [QueueSpec("q", team="q", quotas={"H100": (0, 32, None)})])
    j = submit("j", "q", tasks=4, submit_at=-10)
    pin(j, ["n1", "n2", "n3", "n4"])
    k = None
    for t in range(0, 301, 10):
        if t == 0:
            services.drain_node(Node.objects.get(name="n3"), reason="maintenance", at=at(0))
            j.refresh_from_db()
            assert j.state == "preempting" and j.preempt_deadline == at(30) and len(live(j)) == 32
        if t == 60:
            k = submit("k", "q", submit_at=60)
        if t == 120:
            services.uncordon_node(Node.objects.get(name="n3"))
        if t == 200:
            services.finish_job(k, at=at(200))
        detect_failures(at(t))
        store.run_cycle_once(clock=at(t))
        check_invariants()
        j.refresh_from_db()
        held = live(j)
        assert held == [] or len(held) == 32, f"t={t}: j holds {len(held)} GPUs"
        if t == 30:
            assert j.state == "pending" and j.attempts == 1 and j.submitted_at == at(-10) and j.not_before is None
            assert set(Allocation.objects.filter(job=j).values_list("released_at", flat=True)) == {at(30)}
        if 30 <= t < 200:
            assert j.state == "pending", f"t={t}: only 3 ready nodes (n3 draining until 120, then k holds one)"
        if t >= 60:
            assert Job.objects.get(pk=k.pk).started_at == at(60)
    assert j.state == "running" and j.started_at == at(200)
    assert {n for n, _ in live(j)} == {"n1", "n2", "n3", "n4"}
    kinds = list(Event.objects.filter(job=j).order_by("time", "id").values_list("kind", flat=True))
    assert kinds[-3:] == ["evicted", "requeued", "admitted"]
    assert list(Event.objects.filter(node__name="n3").values_list("kind", flat=True).order_by("id")) == \
        ["drained", "uncordoned"]


def test_reclaim_needs_several_victims_through_the_database():
    """reclaim-needs-several-victims.yaml: a-big (8 GPUs, queue a within quota) reclaims all four b jobs
    (2 GPUs each, borrowed) gracefully: they preempt for b's 30 s grace, are requeued, and a-big runs on
    the GPUs held for it; the b jobs are not re-admitted onto them."""
    load(["n1"], [QueueSpec("a", team="a", quotas={"H100": (0, 8, None)}),
                  QueueSpec("b", team="b", quotas={"H100": (0, 0, 8)})])
    bs = [submit(f"b-{i}", "b", gpus=2, submit_at=0, preemptible=True) for i in range(1, 5)]
    for t in range(0, 61, 5):
        if t == 10:
            big = submit("a-big", "a", gpus=8, submit_at=10)
        store.run_cycle_once(clock=at(t))
        check_invariants()
        if t == 0:
            assert set(Job.objects.filter(queue__name="b").values_list("state", flat=True)) == {"running"}
        if t == 10:
            assert set(Job.objects.filter(queue__name="b").values_list("state", flat=True)) == {"preempting"}
            big.refresh_from_db()
            assert big.state == "pending" and sorted(g for *_, gpus in big.reserved for g in gpus) == list(range(8))
        if 10 <= t < 40:
            assert Job.objects.get(pk=big.pk).state == "pending"
    big.refresh_from_db()
    assert big.state == "running" and big.started_at == at(40) and len(live(big)) == 8
    for b in bs:
        b.refresh_from_db()
        assert (b.state, b.attempts, b.submitted_at) == ("pending", 1, at(0)) and live(b) == []
    decision = Event.objects.get(kind="reclaim")
    assert decision.job_id == big.pk and sorted(v["name"] for v in decision.data["victims"]) == \
        ["b-1", "b-2", "b-3", "b-4"]
    assert decision.data["usage_before"]["b"]["H100"] == 8 and decision.data["usage_after"]["b"]["H100"] == 0
    assert Event.objects.filter(kind="reclaimed").count() == 4 and Event.objects.filter(kind="requeued").count() == 4
    assert Queue.objects.get(name="b").preemption_grace_seconds == 30
