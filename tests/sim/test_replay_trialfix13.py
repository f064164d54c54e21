"""New-user trial 13 findings on `manage.py replay` (notes/fix13.md): F14a (`--until 2` reported a simulated span of
1.85 days: the span began at the first arrival, not at the start the user gave) and F14b (a team whose only job was
rejected showed a fair share in the per-team table: the rejected job's demand was kept until the next cycle)."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from clusterspec import importers
from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.sim.replay import replay

DAY = 86400.0


def _cluster(nodes: int = 1, gpus: int = 2) -> ClusterSpec:
    return ClusterSpec("c", tuple(NodeSpec(f"n{i}", "X", gpus) for i in range(nodes)),
                       queues=(QueueSpec("qa", team="A"), QueueSpec("qb", team="B")))


@pytest.fixture
def shipped(monkeypatch):
    """Point the importer registry at `shipped.cluster` / `shipped.trace` (set by the test)."""
    class Shipped:
        cluster = _cluster()
        trace = Trace("tr", ())

    monkeypatch.setattr(importers, "load_cluster", lambda name, **o: Shipped.cluster, raising=False)
    monkeypatch.setattr(importers, "load_trace", lambda name, **o: Shipped.trace, raising=False)
    return Shipped


# --- F14a: the span is the one asked for --------------------------------------------------------------------

def test_the_span_runs_from_the_given_start_to_until_and_every_rate_over_it():
    """The first job arrives 1 h after the start; until 4 h: the span is 4 h, and the allocation rate and the
    GPU-hour ledger's capacity are over those 4 h (the first hour the cluster was free, nothing waiting)."""
    trace = Trace("t", (TraceJob("a", "qa", 3600.0, 1800.0, 1, 1),))
    report = replay(_cluster(), trace, until=4 * 3600.0, start=0.0)
    assert report.sim_start == 0.0 and report.span_seconds == 4 * 3600.0
    assert report.mean_allocation_rate == pytest.approx(1800.0 / (2 * 4 * 3600.0))
    g = report.gpu_hours
    assert g["capacity"] == pytest.approx(2 * 4.0)
    assert g["free"] == pytest.approx(2 * 4.0 - 0.5) and g["free_fragmented"] == pytest.approx(0.0)
    # without `start` (other callers of the library): from the first arrival, as before
    assert replay(_cluster(), trace, until=4 * 3600.0).span_seconds == 3 * 3600.0


def test_time_before_an_arrival_is_not_counted_as_waiting():
    """Between a's end (600 s) and b's arrival (2 h) nothing is pending: those GPU-hours are free, not
    free_fragmented (the arrival's cycle labelled the whole gap since the last event as waiting)."""
    trace = Trace("t", (TraceJob("a", "qa", 0.0, 600.0, 1, 1), TraceJob("b", "qa", 7200.0, 600.0, 1, 1)))
    g = replay(_cluster(), trace).gpu_hours
    assert g["free_fragmented"] == pytest.approx(0.0), g
    assert g["free"] == pytest.approx(2 * 7800 / 3600.0 - 2 * 600 / 3600.0)


def test_until_2_reports_a_span_of_2_days_in_the_command(shipped, tmp_path):
    """F14a: the Philly window starts at day 20, its first arrival 0.15 days later; `--until 2` said 1.85 days."""
    shipped.trace = Trace("tr", tuple(TraceJob(f"j{i}", "qa", 0.15 * DAY + i * 3600.0, 600.0, 1, 1) for i in range(5)))
    out, path = io.StringIO(), tmp_path / "r.json"
    call_command("replay", "--cluster", "c", "--trace", "tr", "--until", "2", "--json", str(path), stdout=out)
    assert "simulated span                  2.00 days (172,800 s)" in out.getvalue(), out.getvalue()
    data = json.loads(path.read_text())
    assert data["span_days"] == pytest.approx(2.0) and data["gpu_hours"]["capacity"] == pytest.approx(2 * 48.0)
    assert data["mean_allocation_rate"] == pytest.approx(5 * 600.0 / (2 * 2 * DAY))


# --- F14b: a rejected job has no demand after its rejection ---------------------------------------------------

def _rejected_trace() -> Trace:
    """B's only job asks 32 GPUs of a 16-GPU cluster (rejected at once); A runs two small jobs 2 h apart, so
    the cycle after the rejection is 10 minutes later and the next one 2 h later."""
    return Trace("t", (TraceJob("big", "qb", 0.0, 3600.0, 4, 8), TraceJob("a1", "qa", 0.0, 600.0, 1, 1),
                       TraceJob("a2", "qa", 7200.0, 600.0, 1, 1)))


def test_a_team_whose_only_job_was_rejected_has_no_fair_share():
    report = replay(_cluster(nodes=2, gpus=8), _rejected_trace())
    assert report.rejected_by_code == {"never_fits_domain": 1}
    teams = report.fairness["teams"]
    assert teams.get("B", {}).get("fair_share_gpu_hours", 0.0) == 0.0, teams
    assert teams["A"]["mean_usage_over_fair_share"] == pytest.approx(1.0)
    assert report.fairness["jain_mean"] == pytest.approx(1.0)  # B's 0 / 16 GPUs pulled it down
    assert report.rejected_by_team == {"B": 1}


def test_the_team_table_shows_a_rejected_teams_row_and_says_what_fair_means(shipped):
    shipped.cluster, shipped.trace = _cluster(nodes=2, gpus=8), _rejected_trace()
    out = io.StringIO()
    call_command("replay", "--cluster", "c", "--trace", "tr", stdout=out)
    lines = out.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("team "))
    assert lines[header].split() == ["team", "usage/fair", "h", "demand", "GPU-h", "used", "GPU-h", "fair", "rejected"]
    assert lines[header + 1].split() == ["A", "1.00", "0", "0", "0", "0"]
    assert lines[header + 2].split() == ["B", "-", "0", "0", "0", "1"]
    assert lines[header + 3].startswith("GPU-h fair: the team's water-filled fair share while it had demand")


# --- the quota rule of the API in the replay's what-if variants ----------------------------------------------

@pytest.mark.parametrize("triple, needle", [
    ("[0, 10000000000, null]", "quota must be a whole number of GPUs from 0 to 2147483647"),
    ("[-1, 1, 1]", "guarantee must be a whole number of GPUs from 0 to 2147483647"),
    ("[0, 1, 2147483648]", "limit must be a whole number of GPUs from 0 to 2147483647"),
    ("[0, '5', null]", "quota must be a whole number of GPUs from 0 to 2147483647"),
])
def test_what_if_quotas_hold_the_apis_range(shipped, tmp_path, triple, needle):
    """A variant's quota was any number (int() of it: '5' and 1e12 replayed); the quota API's rule now."""
    shipped.trace = Trace("tr", (TraceJob("j", "qa", 0.0, 600.0, 1, 1),))
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"a: {{}}\nb: {{quotas: {{qa: {{X: {triple}}}}}}}\n")
    with pytest.raises(CommandError, match=rf"--what-if .*: b\.quotas\.qa\.X: {needle}"):
        call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(bad), stdout=io.StringIO())
    good = tmp_path / "good.yaml"
    good.write_text("a: {}\nb: {quotas: {qa: {X: [0, 2.0, 2147483647]}}}\n")  # 2.0 is 2, as in the API
    call_command("replay", "--cluster", "c", "--trace", "tr", "--what-if", str(good), stdout=io.StringIO())
