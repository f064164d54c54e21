"""gpuplatform/scheduling/failures.py and the failure-detection task: monitored vs unmonitored nodes, a cordoned node
that goes silent comes back cordoned, draining nodes' stragglers are evicted, the beat schedule."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timedelta, timezone as tz

from django.conf import settings as django_settings

from gpuplatform import services
from gpuplatform.models import Event, Job, Node
from gpuplatform.scheduling import store
from gpuplatform.scheduling.failures import detect_failures
from gpuplatform.scheduling.tasks import detect_node_failures
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


def test_nodes_that_never_reported_are_not_monitored(cluster):
    report = detect_failures(at(10_000))
    assert report.not_ready == [] and set(Node.objects.values_list("state", flat=True)) == {"ready"}


def test_cordoned_node_that_goes_silent_comes_back_cordoned(cluster):
    node = Node.objects.get(name="n0")
    services.record_heartbeat("n0", gpus=[], at=at(0))
    services.cordon_node(node)
    assert detect_failures(at(61)).not_ready == ["n0"]
    assert Node.objects.get(name="n0").state == "not_ready"
    assert detect_failures(at(62)).not_ready == []  # one transition, one Event
    services.record_heartbeat("n0", gpus=[], at=at(70))
    assert Node.objects.get(name="n0").state == "cordoned"
    assert list(Event.objects.filter(node=node).order_by("id").values_list("kind", flat=True)) == \
        ["cordoned", "node_not_ready", "node_ready"]


def test_a_gang_bound_on_a_draining_node_is_evicted_gracefully(submit):
    job = submit("late", tasks=1, gpus=8)
    Node.objects.filter(name="n2").update(state="draining")  # drained while a cycle was binding there
    store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, "n2", tuple(range(8))),),
                                                     "nvl-a2", 1)]), clock=at(0), cycle_number=1)
    # the apply refuses a node that is no longer ready: nothing bound
    assert Job.objects.get(pk=job.pk).state == "pending"
    Node.objects.filter(name="n2").update(state="ready")
    store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, "n2", tuple(range(8))),),
                                                     "nvl-a2", 1)]), clock=at(0), cycle_number=2)
    Node.objects.filter(name="n2").update(state="draining")
    report = detect_failures(at(5))
    job.refresh_from_db()
    assert report.drained == [job.pk] and job.state == "preempting" and job.preempt_deadline == at(35)
    assert detect_failures(at(6)).drained == []  # already preempting: not evicted twice


def test_failure_detection_task_is_scheduled_and_single_flight(cluster, monkeypatch):
    assert django_settings.CELERY_BEAT_SCHEDULE["failure-detection"]["task"] == "scheduler.tasks.detect_node_failures"
    assert detect_node_failures(now=at(0).isoformat())["skipped"] is False

    @contextmanager
    def held_elsewhere(*args, **kwargs):  # a cycle in another process holds the lock
        yield False

    monkeypatch.setattr("gpuplatform.scheduling.locks.single_flight", held_elsewhere)
    assert detect_node_failures(now=at(0).isoformat()) == {"skipped": True}


def test_detection_runs_inside_back_to_back_cycles_when_the_beat_never_gets_the_lock(submit, monkeypatch):
    """Issue #12: under load cycles hold the lock constantly and the periodic detection task skips every
    time. Detection runs inside each cycle, so a dead node's gang is requeued within heartbeat timeout +
    grace + one check period of its last heartbeat (60 + 120 + 10 s here), not whenever the beat wins."""
    from gpuplatform.models import Task
    from gpuplatform.scheduling.tasks import run_scheduling_cycle
    from tests.platform.helpers_platform import first_fit

    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    period = 10
    job = submit("victim", tasks=1, gpus=8)
    names = list(Node.objects.values_list("name", flat=True))
    for name in names:
        services.record_heartbeat(name, gpus=[], at=at(0))
    assert run_scheduling_cycle(clock=at(0).isoformat())["binds"] == 1
    dead = Task.objects.get(job=job).node.name

    @contextmanager
    def held_elsewhere(*args, **kwargs):  # the beat's detection always finds a cycle holding the lock
        yield False

    failed_at = None
    for seconds in range(period, 400, period):
        for name in names:
            if name != dead:
                services.record_heartbeat(name, gpus=[], at=at(seconds))
        with monkeypatch.context() as m:
            m.setattr("gpuplatform.scheduling.locks.single_flight", held_elsewhere)
            assert detect_node_failures(now=at(seconds).isoformat()) == {"skipped": True}
        run_scheduling_cycle(clock=at(seconds).isoformat())  # cycles back to back, as under load
        if failed_at is None and Event.objects.filter(kind="node_failed", node__name=dead).exists():
            failed_at = seconds
    timeout, grace = django_settings.HEARTBEAT_TIMEOUT_SECONDS, django_settings.NODE_FAILURE_GRACE_SECONDS
    assert failed_at is not None and failed_at <= timeout + grace + period, failed_at
    assert Node.objects.get(name=dead).state == "not_ready"
    assert Event.objects.filter(kind="node_failed", node__name=dead).count() == 1
    first_try = Task.objects.filter(job=job).exclude(node__name=dead).exists() or \
        Job.objects.get(pk=job.pk).state == "pending"
    assert first_try  # requeued (pending with backoff) or already re-placed on a live node


def test_a_detection_error_does_not_stop_the_cycle(submit, monkeypatch):
    from gpuplatform.scheduling.tasks import run_scheduling_cycle
    from tests.platform.helpers_platform import first_fit

    monkeypatch.setattr("scheduler.core.run_cycle", first_fit)
    monkeypatch.setattr("gpuplatform.scheduling.failures.detect_failures", lambda now: 1 / 0)
    submit("j", tasks=1, gpus=1)
    assert run_scheduling_cycle(clock=at(0).isoformat())["binds"] == 1


def _running_on_n0(submit):
    job = submit("hb", tasks=1, gpus=2)
    store.apply_result(CycleResult(bindings=[Binding(job.pk, (TaskPlacement("worker", 0, "n0", (0, 1)),), "nvl-a1", 1)]),
                       clock=at(0), cycle_number=1)
    for name in ("n0", "n1"):
        services.record_heartbeat(name, gpus=[], at=at(0))
    return job


def test_heartbeat_loss_is_a_health_rule_whose_default_is_the_settings(submit, settings):
    """The shipped heartbeat-loss rule (value "default") fails a silent node's tasks after
    HEARTBEAT_TIMEOUT_SECONDS + NODE_FAILURE_GRACE_SECONDS, whatever those are set to."""
    from gpuplatform.scheduling.failures import heartbeat_rules

    settings.HEARTBEAT_TIMEOUT_SECONDS, settings.NODE_FAILURE_GRACE_SECONDS = 30, 20
    (rule, threshold), = heartbeat_rules()
    assert (rule.id, rule.action, threshold) == ("heartbeat-loss", "fail_tasks", timedelta(seconds=50))
    job = _running_on_n0(submit)
    assert detect_failures(at(49)).failed_nodes == []
    report = detect_failures(at(51))
    assert report.failed_nodes == ["n0"] and report.requeued == [job.pk]
    assert Event.objects.get(kind="node_failed").data["rule"] == "heartbeat-loss"


def test_an_admin_heartbeat_rule_fails_sooner_or_cordons_the_node_when_it_returns(submit):
    from gpuplatform.models import HealthRule

    services.save_health_rule(HealthRule(name="hb-fast", signal="heartbeat_lost_seconds", op="gt", value=90,
                                         action="fail_tasks", category="platform", source="our SLO: 90 s"))
    services.save_health_rule(HealthRule(name="hb-cordon", signal="heartbeat_lost_seconds", op="gt", value=70,
                                         action="cordon", category="platform", source="flapping nodes"))
    job = _running_on_n0(submit)
    assert detect_failures(at(65)).not_ready == ["n0", "n1"]
    assert detect_failures(at(85)).failed_nodes == []  # the cordon rule acted, the 90 s one not yet
    ev = Event.objects.get(kind="health_rule", node__name="n0")
    assert ev.data["rule"] == "admin:hb-cordon" and ev.data["action"] == "cordon"
    detect_failures(at(86))
    assert Event.objects.filter(kind="health_rule", node__name="n0").count() == 1  # once per silence
    report = detect_failures(at(95))  # before the shipped 180 s
    assert report.failed_nodes == ["n0"] and report.requeued == [job.pk]
    services.record_heartbeat("n0", gpus=[], at=at(100))
    node = Node.objects.get(name="n0")
    assert node.state == "cordoned" and "hb-cordon" in node.health_reason


def test_value_default_is_only_for_the_heartbeat_signal():
    import pytest

    from gpuplatform.diagnosis import engine

    entry = {"id": "x", "signal": "thermal_slowdown_seconds", "op": "gt", "value": "default", "action": "record",
             "source": "s"}
    with pytest.raises(engine.RuleError, match="needs a number"):
        engine.parse_health_rules({"rules": [entry]})
    engine.parse_health_rules({"rules": [{**entry, "signal": "heartbeat_lost_seconds"}]})
