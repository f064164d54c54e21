"""`manage.py replay`: importer registry in, summary table and JSON out, no database."""
from __future__ import annotations

import functools
import io
import json
import re

import pytest
from django.core.management import call_command

from clusterspec import importers
from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec, Trace, TraceJob
from gpuplatform.management.commands import replay as command
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement
from scheduler.sim.replay import replay


def one_by_one(snapshot, config):
    """Stand-in engine: starts the first pending 1-GPU job on the first free GPU, one per cycle."""
    result = CycleResult()
    for node in snapshot.nodes:
        free = [g for g in range(node.gpus) if g not in node.used]
        job = next((j for j in snapshot.jobs if j.state == "pending"), None)
        if free and job is not None:
            result.bindings.append(Binding(job.id, (TaskPlacement("worker", 0, node.name, (free[0],)),), "", 0))
            break
    return result


@pytest.fixture
def registry(monkeypatch):
    calls = {}
    cluster = ClusterSpec("c", (NodeSpec("n0", "X", 2),), queues=(QueueSpec("q", team="t"),))
    trace = Trace("tr", tuple(TraceJob(f"j{i}", "q", i * 3600.0, 600.0, 1, 1) for i in range(5)))

    def load_cluster(name, **opts):
        calls["cluster"] = (name, opts)
        return cluster

    def load_trace(name, **opts):
        calls["trace"] = (name, opts)
        return trace

    monkeypatch.setattr(importers, "load_cluster", load_cluster, raising=False)
    monkeypatch.setattr(importers, "load_trace", load_trace, raising=False)
    monkeypatch.setattr(command, "replay", functools.partial(replay, engine=one_by_one))
    return calls


def test_replay_command_prints_a_summary_and_writes_json(registry, tmp_path):
    out = io.StringIO()
    path = tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--until", "0.1", "--json", str(path),
                 "--scale", "0.5", "--cycle-interval", "30", stdout=out)
    assert registry == {"cluster": ("c", {"scale": 0.5}), "trace": ("tr", {})}
    text = out.getvalue()
    assert "mean allocation rate" in text and "queueing by size" in text
    data = json.loads(path.read_text())
    # until 0.1 day = 8640 s: arrivals at 0, 1h, 2h (3h > 2.4h is not seen).
    assert data["jobs_submitted"] == 3 and data["jobs_finished"] == 3
    assert data["options"]["cycle_interval"] == 30 and data["team_gpu_hours"] == {"t": pytest.approx(0.5)}


def test_philly_starts_at_day_20_by_default_and_start_overrides(registry):
    call_command("replay", "--cluster", "c", "--trace", "philly", stdout=io.StringIO())
    assert registry["trace"] == ("philly", {"start_days": 20.0})
    call_command("replay", "--cluster", "c", "--trace", "philly", "--start", "0", stdout=io.StringIO())
    assert registry["trace"] == ("philly", {})


def test_start_shifts_other_traces_in_the_command(registry, tmp_path):
    path = tmp_path / "r.json"
    # arrivals every hour; from 2h (1/12 day): 3 jobs, re-based to 0, 1h, 2h.
    call_command("replay", "--cluster", "c", "--trace", "tr", "--start", str(2 / 24), "--json", str(path),
                 stdout=io.StringIO())
    data = json.loads(path.read_text())
    assert registry["trace"] == ("tr", {}) and data["jobs_submitted"] == 3
    assert data["options"]["start"] == pytest.approx(2 / 24)


def test_compare_runs_both_policies_and_failure_options_reach_the_report(registry, tmp_path):
    out = io.StringIO()
    path = tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--compare", "--json", str(path),
                 "--failure-rate", "50000", "--checkpoint-interval", "120", "--detection-timeout", "30",
                 "--seed", "3", stdout=out)
    text = out.getvalue()
    assert "evictions per started job" in text and "Jain's index, contended" in text
    data = json.loads(path.read_text())
    assert set(data) == {"full", "fifo"}
    assert data["fifo"]["config"]["fair_share"] is False and data["full"]["config"]["fair_share"] is True
    f = data["full"]["failures"]
    assert (f["rate"], f["detection_timeout"], f["seed"]) == (50000, 30, 3)
    assert data["full"]["checkpoint"] == {"interval": 120, "cost": 0.0}
    assert data["full"]["options"]["policy"] == "full"


def test_single_policy_summary_shows_failures(registry):
    out = io.StringIO()
    call_command("replay", "--cluster", "c", "--trace", "tr", "--policy", "fifo", "--failure-rate", "50000",
                 stdout=out)
    text = out.getvalue()
    assert "policy" in text and "fifo" in text and "time to restart" in text and "goodput" in text


def test_what_if_file_replays_each_variant_side_by_side(registry, tmp_path):
    """Issue #15: --what-if FILE compares two quota sets / policies on the same trace."""
    spec = tmp_path / "w.yaml"
    spec.write_text("base: {}\nfifo-and-quota:\n  policy: fifo\n  quotas: {q: {X: [0, 1, 1]}}\n  weights: {q: 2}\n")
    out, path = io.StringIO(), tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(spec), "--json", str(path), stdout=out)
    data = json.loads(path.read_text())
    assert set(data) == {"base", "fifo-and-quota"}
    assert data["fifo-and-quota"]["config"]["fair_share"] is False and data["base"]["config"]["fair_share"] is True
    assert "base" in out.getvalue() and "fifo-and-quota" in out.getvalue()
    bad = tmp_path / "bad.yaml"
    for body, needle in (("a: {}\nb: {quotas: {nope: {X: [0, 1, 1]}}}\n", "b.quotas.nope: no such queue"),
                         ("a: {}\nb: {quotas: {q: {X: [2, 1, 1]}}}\n", "guarantee <= quota"),
                         ("a: {}\nb: {policy: magic}\n", "b.policy"),
                         ("a: {}\nb: {config: {warp: 9}}\n", "not a CycleConfig field"),
                         ("only: {}\n", "at least two")):
        bad.write_text(body)
        with pytest.raises(command.CommandError, match=needle):
            call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(bad), stdout=io.StringIO())


def test_apply_variant_changes_quotas_weights_and_config():
    from scheduler.forecast.variants import apply_variant

    cluster = ClusterSpec("c", (NodeSpec("n0", "X", 2),), queues=(QueueSpec("q", team="t", quotas={"X": (0, 1, 2)}),))
    changed, config = apply_variant(cluster, {"config": {"backfill": False}, "quotas": {"q": {"X": [1, 2, None]}},
                                              "weights": {"q": 3}}, command.POLICIES)
    assert changed.queues[0].quotas == {"X": (1, 2, None)} and changed.queues[0].weight == 3.0
    assert config.backfill is False and cluster.queues[0].quotas == {"X": (0, 1, 2)}


def test_half_life_option_sets_the_decayed_usage_order(registry, tmp_path):
    """--half-life DAYS sets CycleConfig.usage_half_life (default 7 days; 0 = live usage only), recorded in the
    report's config; the replay keeps every queue's decayed usage as the platform does."""
    for days, expect in (("0", None), ("2", 2 * 86400.0)):
        path = tmp_path / f"r{days}.json"
        call_command("replay", "--cluster", "c", "--trace", "tr", "--half-life", days, "--json", str(path),
                     stdout=io.StringIO())
        assert json.loads(path.read_text())["config"]["usage_half_life"] == expect
    path = tmp_path / "default.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--json", str(path), stdout=io.StringIO())
    assert json.loads(path.read_text())["config"]["usage_half_life"] == 7 * 86400.0


def test_start_past_the_traces_last_arrival_is_an_error_naming_the_span(registry):
    """New-user trial 10, F13: `--start 400` replayed an empty trace and printed an empty report; it names the
    trace's span now (the file-less registry trace: arrivals at hours 0..4)."""
    with pytest.raises(command.CommandError, match=r"--start 1: the trace tr has no job .* span days 0\.0 to 0\.2"):
        call_command("replay", "--cluster", "c", "--trace", "tr", "--start", "1", stdout=io.StringIO())


def test_until_past_the_traces_last_arrival_says_so(registry, tmp_path):
    """F13: an --until beyond the last arrival ran on silently; the report's notes say so (and the summary)."""
    out, path = io.StringIO(), tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--until", "3", "--json", str(path), stdout=out)
    note = [n for n in json.loads(path.read_text())["notes"] if n.startswith("--until 3 days is past")]
    assert note and "day 0.17" in note[0]
    assert "is past the trace's last arrival" in out.getvalue()
    out, path = io.StringIO(), tmp_path / "inside.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--until", "0.1", "--json", str(path), stdout=out)
    assert not any("past the trace" in n for n in json.loads(path.read_text())["notes"])


def test_a_job_bigger_than_the_cluster_is_rejected_for_that_not_a_queue_limit(monkeypatch, tmp_path):
    """F13: a job asking more GPUs than the whole cluster was rejected as `never_fits_queue_limit` ("above queue
    limit"), hiding that it can never fit anywhere; the production engine names the cluster now. A job only
    above its queue's limit keeps that reason."""
    cluster = ClusterSpec("c", (NodeSpec("n0", "X", 8), NodeSpec("n1", "X", 8)),
                          queues=(QueueSpec("q", team="t", quotas={"X": (0, 4, 4)}),))
    trace = Trace("tr", (TraceJob("huge", "q", 0.0, 600.0, 4, 8), TraceJob("over-limit", "q", 0.0, 600.0, 1, 8)))
    monkeypatch.setattr(importers, "load_cluster", lambda name, **o: cluster, raising=False)
    monkeypatch.setattr(importers, "load_trace", lambda name, **o: trace, raising=False)
    path = tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--json", str(path), stdout=io.StringIO())
    data = json.loads(path.read_text())
    assert data["rejected_by_code"] == {"never_fits_domain": 1, "never_fits_queue_limit": 1}


@pytest.mark.parametrize("flag", ["--time-limit-factor"])
def test_time_limit_factor_must_be_above_zero(registry, flag):
    with pytest.raises(command.CommandError, match=f"{flag} must be a finite number above zero"):
        call_command("replay", "--cluster", "c", "--trace", "tr", flag, "-1", stdout=io.StringIO())


def test_what_if_weights_hold_the_apis_range_and_a_string_is_not_a_number(registry, tmp_path):
    """New-user trial 12, F13: weights of 1e9 and 1e-7 were replayed though the API's set_weight takes 0.001 to
    1,000,000; YAML 1.1 reads `1e308` as a string, which was refused as "must be a number > 0"."""
    bad = tmp_path / "bad.yaml"
    for weight, needle in (("1000000000.0", r"b\.weights\.q: weight must be a number from 0\.001 to 1,000,000"),
                           ("0.0000001", r"b\.weights\.q: weight must be a number from 0\.001 to 1,000,000"),
                           ("1e308", r"b\.weights\.q: '1e308' is not a number")):
        bad.write_text(f"a: {{}}\nb: {{weights: {{q: {weight}}}}}\n")
        with pytest.raises(command.CommandError, match=needle):
            call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(bad), stdout=io.StringIO())


def test_a_json_write_that_fails_after_the_replay_is_one_line(registry, tmp_path, monkeypatch):
    """F1: a write that fails after the check (the disk filled, the directory went away) is a CommandError naming
    --json, never a traceback."""
    from pathlib import Path

    def fail(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", fail)
    path = tmp_path / "r.json"
    with pytest.raises(command.CommandError, match=f"--json {re.escape(str(path))}: cannot write it: .*No space left"):
        call_command("replay", "--cluster", "c", "--trace", "tr", "--json", str(path), stdout=io.StringIO())


@pytest.mark.parametrize("args, needle", [
    (["--detection-timeout", "-1"], "--detection-timeout must be a finite number zero or more, got -1"),
    (["--repair-time", "-1"], "--repair-time must be a finite number zero or more, got -1"),
    (["--failure-rate", "-1"], "--failure-rate must be a finite number zero or more, got -1"),
    (["--failure-rate", "1e9"], "--failure-rate must be at most 100,000 failures per 1,000 GPU-days, got 1e+09"),
    (["--compress", "inf"], "--compress must be a finite number above zero, got inf"),
    (["--compress", "0"], "--compress must be a finite number above zero, got 0"),
])
def test_failure_and_compress_options_are_refused_naming_the_option(registry, args, needle):
    """New-user trial 12, F13: --detection-timeout -1 (no failure rate) replayed as normal, --failure-rate 1e9 ran
    for minutes without an end, --compress inf blamed a --start never given. (--until bounds the replay a missing
    check would run.)"""
    out = io.StringIO()
    with pytest.raises(command.CommandError, match=needle.replace("+", r"\+")):
        call_command("replay", "--cluster", "c", "--trace", "tr", "--until", "0.05", *args, stdout=out)
    assert out.getvalue() == "" and registry == {}  # refused before anything is loaded or replayed


@pytest.mark.parametrize("where, needle", [
    ("missing/x.json", "cannot write it: no such directory"),
    ("", "cannot write it: it is a directory"),
])
def test_a_json_path_that_cannot_be_written_is_refused_before_the_replay(registry, tmp_path, where, needle):
    """New-user trial 12, F1: `--json /nonexistent/dir/x.json` (or a directory) ran the whole replay, then printed a
    traceback from write_text; it is a one-line CommandError naming --json and the path, before anything runs."""
    path = str(tmp_path / where) if where else str(tmp_path)
    out = io.StringIO()
    with pytest.raises(command.CommandError, match=f"^--json {re.escape(path)}: {needle}"):
        call_command("replay", "--cluster", "c", "--trace", "tr", "--json", path, stdout=out)
    assert out.getvalue() == "" and registry == {}
