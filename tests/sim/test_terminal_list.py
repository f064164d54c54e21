"""CycleResult.terminal, the engine's list of the jobs whose reason is terminal (issue 16, session 11): on every
cycle of replays that give terminal reasons through each of allocate's paths (a job tried one by one, a run of a
queue refused in one step by _Bulk, a queue's kept outcome taken whole), the list is exactly the jobs that a scan
of CycleResult.pending finds terminal, each once, and the replay drops the same jobs as it did by scanning."""
from __future__ import annotations

import csv
from functools import partial
from pathlib import Path

import pytest

from clusterspec.importers import load_trace
from clusterspec.spec import Trace, TraceJob, vc_partitioned_cluster
from scheduler.core import CycleConfig, EngineCache
from scheduler.core.actions import allocate
from scheduler.core.cycle import run_cycle
from scheduler.sim.replay import replay

VC_NODES = Path(__file__).resolve().parents[2] / "data" / "philly" / "philly_vc_nodes.csv"


def _oversized_slice(days: float = 0.5):
    """The Helios slice's hard partitions of the 11 Philly VCs, each one node of 8 GPUs here, every fourth job
    made 16 GPUs, which no wait can start (never_fits_queue_limit), among many of the same shape in a queue."""
    with open(VC_NODES) as f:
        vcs = {r["vc"]: 1 for r in csv.DictReader(f)}
    trace = load_trace("philly", compress=1.0, start_days=30.0, until_days=30.0 + days)
    jobs = [TraceJob(j.id, j.queue, float(round(j.submit)), float(max(1, round(min(j.duration, 6 * 3600)))),
                     *((2, 8) if i % 4 == 0 else (j.tasks, j.gpus_per_task)),  # every fourth: 16 GPUs, > 8
                     min_available=2 if i % 4 == 0 else j.tasks)
            for i, j in enumerate(j for j in trace.jobs if j.queue in vcs)]
    return vc_partitioned_cluster(vcs, borrow=False), Trace("oversized", tuple(jobs))


class _Checked:
    """The engine, checking each result's terminal list against a scan of its reasons."""

    every_cycle = True  # called for a settled cycle too (Replay.settled): every cycle's list is checked

    def __init__(self):
        self.cache, self.cycles, self.terminal = EngineCache(), 0, 0

    def __call__(self, snapshot, config):
        result = run_cycle(snapshot, config, cache=self.cache)
        scanned = [j for j, r in result.pending.items() if r.terminal]
        assert result.terminal is not None
        assert len(result.terminal) == len(set(result.terminal))
        assert set(result.terminal) == set(scanned), (self.cycles, result.terminal, scanned)
        self.cycles += 1
        self.terminal += len(scanned)
        return result


def _scanning(snapshot, config, cache):
    """The engine with its list withheld: the replay scans every reason, as before the list."""
    result = run_cycle(snapshot, config, cache=cache)
    result.terminal = None
    return result


@pytest.mark.parametrize("interval, path", [(1.0, "kept outcome"), (600.0, "bulk")])
def test_terminal_list_matches_the_reasons_on_a_partitioned_slice(interval, path, monkeypatch):
    """Arrivals one per cycle (1 s) reach a queue's kept outcome; many per cycle (600 s), a run of new jobs of one
    shape refused in one step after the first (_Bulk.run): each path is seen giving terminal reasons."""
    given = {"kept outcome": 0, "bulk": 0}
    bulk_run, kept_given = allocate._Bulk.run, allocate._PendingOrder.given

    def counted_run(self, *args):
        before = len(self.terminal)
        out = bulk_run(self, *args)
        given["bulk"] += len(self.terminal) - before
        return out

    def counted_given(self, queue, outcome):
        out = kept_given(self, queue, outcome)
        if out is not None:
            given["kept outcome"] += sum(r.terminal for r in outcome.reasons)
        return out

    monkeypatch.setattr(allocate._Bulk, "run", counted_run)
    monkeypatch.setattr(allocate._PendingOrder, "given", counted_given)
    cluster, trace = _oversized_slice()
    engine = _Checked()
    report = replay(cluster, trace, config=CycleConfig(), engine=engine, cycle_interval=interval, fairness=False)
    assert engine.cycles == report.cycles > 100
    assert engine.terminal > 100  # terminal reasons were given (a check that cannot fail otherwise)
    assert given[path] > 0, given
    scanned = replay(cluster, trace, config=CycleConfig(), engine=partial(_scanning, cache=EngineCache()),
                     cycle_interval=interval, fairness=False)
    assert report.jobs_rejected == scanned.jobs_rejected == engine.terminal
    assert report.rejected_by_code == scanned.rejected_by_code
    assert (report.cycles, report.jobs_started, report.queueing) == (scanned.cycles, scanned.jobs_started,
                                                                     scanned.queueing)
