"""New-user trial 13, F5 and F6 on `manage.py replay` (notes/fixsim13.md): a what-if file of the wrong shape crashed
with a traceback (`quotas: {q: 5}` -> AttributeError) and nonsense config values and flavors were replayed; a trace
with a duration of 1e300 was replayed and printed as 300-digit numbers."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from clusterspec import importers
from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.forecast.variants import VariantError, apply_variant, config_error
from scheduler.core.snapshot import CycleConfig


@pytest.fixture
def shipped(monkeypatch):
    class Shipped:
        cluster = ClusterSpec("c", (NodeSpec("n0", "X", 2),), queues=(QueueSpec("qa", team="A"),))
        trace = Trace("tr", (TraceJob("j", "qa", 0.0, 600.0, 1, 1),))

    monkeypatch.setattr(importers, "load_cluster", lambda name, **o: Shipped.cluster, raising=False)
    monkeypatch.setattr(importers, "load_trace", lambda name, **o: Shipped.trace, raising=False)
    return Shipped


@pytest.mark.parametrize("body, message", [
    ("{quotas: {qa: 5}}", "b.quotas.qa: must map flavor -> [guarantee, quota, limit or null], e.g. {X: [0, 8, 16]}"),
    ("{quotas: {qa: 1e300}}", "b.quotas.qa: must map flavor -> "),
    ("{quotas: [1, 2]}", "b.quotas: must be a mapping of queue -> flavor -> [guarantee, quota, limit or null], not list"),
    ("{weights: [1]}", "b.weights: must be a mapping of queue -> weight, not list"),
    ("{config: [backfill]}", "b.config: must be a mapping of CycleConfig field -> value, not list"),
    ("{quotas: {qa: {A100: [0, 8, 8]}}}", "b.quotas.qa.A100: no node of cluster 'c' has this flavor (its flavors: X)"),
    ('{config: {backfill: "no"}}', "b.config.backfill: must be true or false, not 'no' (a quoted word"),
    ("{config: {preemption: 1}}", "b.config.preemption: must be true or false, not 1"),
    ("{config: {max_preemptors: -5}}", "b.config.max_preemptors: must be a whole number from 0 to 10,000, not -5"),
    ("{config: {max_preemptors: 2.5}}", "b.config.max_preemptors: must be a whole number from 0 to 10,000, not 2.5"),
    ("{config: {reschedule_every: 0}}", "b.config.reschedule_every: must be a whole number from 1 to 1,000,000"),
    ("{config: {starvation_seconds: abc}}", "b.config.starvation_seconds: must be a number from 0 to 316,224,000 "
                                            "seconds, not 'abc'"),
    ("{config: {starvation_seconds: .inf}}", "b.config.starvation_seconds: must be a number from 0"),
    ("{config: {usage_half_life: 0}}", "b.config.usage_half_life: must be a number from 1 to 316,224,000 seconds "
                                       "(or null: no decay), not 0"),
    ("{config: {nope: 1}}", "b.config.nope: not a CycleConfig field"),
])
def test_a_bad_variant_is_a_clear_error_naming_its_path(shipped, tmp_path, body, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"a: {{}}\nb: {body}\n")
    with pytest.raises(CommandError) as info:
        call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(bad), stdout=io.StringIO())
    assert str(info.value).startswith(f"--what-if {bad}: {message}"), str(info.value)


def test_good_config_values_are_taken_whole_floats_as_ints(shipped, tmp_path):
    cluster = shipped.cluster
    _, config = apply_variant(cluster, {"config": {"backfill": False, "max_preemptors": 3.0, "usage_half_life": None,
                                                   "starvation_seconds": 60, "reschedule_every": 1}},
                              {"full": CycleConfig()}, "v")
    assert config.backfill is False and config.max_preemptors == 3 and type(config.max_preemptors) is int
    assert config.usage_half_life is None and config.starvation_seconds == 60
    assert config_error("max_preemptors", 0) is None and config_error("max_preemptors", True) is not None
    with pytest.raises(VariantError, match=r"^v\.config\.max_reservations: must be a whole number"):
        apply_variant(cluster, {"config": {"max_reservations": "8"}}, {"full": CycleConfig()}, "v")
    good = tmp_path / "good.yaml"
    good.write_text("a: {}\nb: {config: {backfill: false, max_preemptors: 0}, quotas: {qa: {X: [0, 1, 2]}}}\n")
    call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(good), stdout=io.StringIO())


def test_a_trace_with_an_absurd_duration_is_refused_by_replay(tmp_path):
    trace = tmp_path / "huge.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,1e300,1,100,vc1\n")
    with pytest.raises(CommandError, match=r"huge\.csv line 2, column duration: expected a number <= 31,622,400 "
                                           r"seconds \(366 days\), got '1e300'"):
        call_command("replay", "--cluster", "philly", "--trace", str(trace), "--start", "0", stdout=io.StringIO())
