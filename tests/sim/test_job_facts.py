"""The job figures a cycle takes instead of scanning every job (core/jobindex.py, issue 16): the ones the replay's
state keeps per change (snapshot.jobs.job_facts, and the pending jobs' GPUs for the fairness meter) and the ones EngineCache.scan keeps by identity for any other
tuple are, every cycle, those of a scan of every job and node from scratch; and the engine decides the same
with them as without a cache. Slices: Philly at 0.05 scale (reclaim evictions, grace periods) with some jobs
elastic (min_available 1, so running jobs are short of tasks and grow), some of higher priority (preemption)
and some fractional (GPU sharing), under exact time limits; nodes fail and come back in one of them."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from clusterspec.importers import load_cluster, load_trace
from clusterspec.spec import Trace
from scheduler.core import EngineCache, run_cycle
from scheduler.core.cache import PendingChanges
from scheduler.core.jobindex import FactTuple, JobCounts, SnapshotIndex, _node_shares
from scheduler.core.plugins.fairshare import schedulable_gpus
from scheduler.core.sharing import has_sharing
from scheduler.core.spares import has_spares
from scheduler.sim.failures import FailureModel
from scheduler.sim.replay import Replay


def scratch(snapshot) -> tuple:
    """Facts' figures by a pass over every job and node."""
    running = [j for j in snapshot.jobs if j.state == "running"]
    short = any(j.placement and len(j.placement) < sum(r.tasks for r in j.roles) for j in running)
    prios = [j.priority for j in running if j.preemptible]
    gpus: dict = {}  # (queue, node) -> running GPUs there (QueueTree's charges)
    for j in running:
        for t in j.placement:
            if t.gpus:
                gpus[(j.queue, t.node)] = gpus.get((j.queue, t.node), 0) + len(t.gpus)
    holding = sum(1 for j in snapshot.jobs if j.state == "pending" and j.reserved)
    return (has_sharing(snapshot), bool(short), min(prios) if prios else None,
            sum(j.state != "pending" for j in snapshot.jobs), any(j.state != "pending" and j.reserved for j in snapshot.jobs),
            has_spares(snapshot), schedulable_gpus(snapshot.nodes), gpus, holding,
            sum(1 for j in snapshot.jobs if j.state == "preempting" and j.evicted_for is not None),
            max((j.priority for j in snapshot.jobs if j.state == "pending"), default=None),
            # what a cycle's fixed point rests on (core.cycle.settled_until)
            min((j.priority for j in snapshot.jobs if j.state == "pending"), default=None),
            sum(1 for j in snapshot.jobs if j.state != "pending" and j.time_limit is not None),
            sum(1 for j in snapshot.jobs if j.state == "pending" and j.time_limit is not None),
            sum(1 for j in snapshot.jobs if j.state == "pending" and any(r.min_available < r.tasks for r in j.roles)))


def mixed_trace(fractions: bool) -> Trace:
    trace = load_trace("philly", start_days=40.0, until_days=40.25)
    jobs = []
    for i, j in enumerate(trace.jobs):
        if j.tasks * j.gpus_per_task > 1 and i % 2 == 0:  # elastic: may start short of tasks and grow
            j = replace(j, tasks=j.tasks * j.gpus_per_task, gpus_per_task=1, min_available=1)
        if i % 5 == 0:
            j = replace(j, priority=2)  # preempts lower-priority jobs of its queue
        if fractions and j.tasks == 1 and j.gpus_per_task == 1 and i % 7 == 0:
            j = replace(j, gpu_milli=500)
        jobs.append(j)
    return Trace("mixed", tuple(jobs))


def checked_replay(fractions: bool):
    last_live: list = [None, {}]  # (token, id -> job not pending) of the previous snapshot
    seen = {"live_changes": 0, "timed": 0, "elastic": 0, "cycles": 0, "short": 0, "sharing": 0, "preempt": 0, "down": 0, "holding": 0, "evicting": 0, "given": 0,
            "moved": 0}
    cache, index = EngineCache(), SnapshotIndex()
    handed, diffed = PendingChanges(), PendingChanges()  # with the producer's changes, and by the lists alone

    def engine(snapshot, config):
        expected = scratch(snapshot)
        assert isinstance(snapshot.jobs, FactTuple)
        counts = JobCounts()
        for j in snapshot.jobs:
            counts.add(j)
        assert snapshot.jobs.job_facts == counts.facts()
        # the jobs not pending with a time limit (backfill's shadow_reservation skips its pass when there is none)
        timed = sum(1 for j in snapshot.jobs if j.state != "pending" and j.time_limit is not None)
        assert snapshot.jobs.timed == counts.timed == timed
        seen["timed"] += timed > 0
        # the jobs not pending that came and went since the previous snapshot (FactTuple.live_changes): exactly
        # what a diff by identity of the two snapshots' jobs not pending gives
        live_now = {id(j): j for j in snapshot.jobs[:snapshot.jobs.pending_from]}
        changes = snapshot.jobs.live_changes
        if changes is not None and changes[0] is last_live[0]:  # (snapshots the engine is not given break the chain)
            assert sorted(map(id, changes[2])) == sorted(i for i in live_now if i not in last_live[1])
            assert sorted(map(id, changes[3])) == sorted(i for i in last_live[1] if i not in live_now)
            seen["live_changes"] += bool(changes[2] or changes[3])
        last_live[:] = [changes[1] if changes is not None else None, live_now]
        # the pending jobs from where the producer says they begin: exactly those a scan finds, in the same order
        start = snapshot.jobs.pending_from
        assert start is not None
        assert list(snapshot.jobs[start:]) == [j for j in snapshot.jobs if j.state == "pending"]
        assert all(j.state != "pending" for j in snapshot.jobs[:start])
        assert snapshot.jobs.unique_ids and len({j.id for j in snapshot.jobs}) == len(snapshot.jobs)
        assert run.state.counts.pending_gpus == sum(j.gpus_requested for j in snapshot.jobs if j.state == "pending")
        if snapshot.jobs:  # a job listed twice: its count is not known
            assert index.update((*snapshot.jobs, *snapshot.jobs[:1]), snapshot.nodes).live is None
        for facts in (cache.scan(snapshot), index.update(tuple(snapshot.jobs), snapshot.nodes)):  # replay's, by identity
            assert tuple(facts)[:6] == expected[:6]
            assert (facts.running_gpus, facts.holding, facts.evicting, facts.highest_pending) == expected[7:11]
            assert (facts.lowest_pending, facts.timed, facts.pending_timed, facts.pending_elastic) == expected[11:]
            seen["elastic"] += bool(facts.pending_elastic)
            per_queue: dict = {}  # the running GPUs per queue (QueueTree's totals on a one-flavor cluster)
            for (queue, _), gpus in expected[7].items():
                per_queue[queue] = per_queue.get(queue, 0) + gpus
            assert facts.running_queues == per_queue
            seen["evicting"] += bool(facts.evicting)
            seen["holding"] += bool(facts.holding)
            if facts.schedulable is None:  # only while some node is down (then the cycle makes its own pass)
                assert any(not n.schedulable for n in snapshot.nodes)
                seen["down"] += 1
            else:
                assert list(facts.schedulable.items()) == list(expected[6].items())  # the same order too
        assert index.sharing_nodes == sum(map(_node_shares, snapshot.nodes))
        # the producer's changes to the pending list (FactTuple.pending_changes) give what diffing the lists gives
        pending, given = list(snapshot.jobs[start:]), snapshot.jobs.pending_changes
        taken = given is not None and given[0] is handed.token
        handed.advance(pending, given)
        diffed.advance(pending)
        assert list(map(id, handed.came)) == list(map(id, diffed.came))  # the same jobs in the same order
        assert sorted(map(id, handed.gone)) == sorted(map(id, diffed.gone))
        assert (handed.ids, handed.valid, handed.epoch) == (diffed.ids, diffed.valid, diffed.epoch)
        assert handed.jobs.keys() == diffed.jobs.keys()
        seen["given"] += taken
        seen["moved"] += taken and bool(handed.came or handed.gone)
        seen["cycles"] += 1
        seen["short"] += expected[1]
        seen["sharing"] += expected[0]
        result = run_cycle(snapshot, config, cache=cache)
        seen["preempt"] += sum(e.rule == "preempt" for e in result.evictions)
        return result

    failures = FailureModel(rate=20.0, repair_time=3600.0, seed=3) if fractions else None  # nodes go down and back
    run = Replay(load_cluster("philly", scale=0.05), mixed_trace(fractions), engine=engine, time_limit_factor=1.0,
                 failures=failures)
    return seen, run.run()


def test_replay_job_facts_match_a_scan_every_cycle():
    seen, report = checked_replay(fractions=False)
    assert seen["cycles"] > 50 and report.jobs_started > 100
    assert seen["short"] > 0 and seen["preempt"] > 0  # the figures were not all trivially empty
    assert seen["timed"] > 50  # jobs with time limits ran (their count was checked, not only zeros)
    assert seen["elastic"] > 0  # elastic jobs waited (their count was checked, not only zeros)
    assert seen["live_changes"] > 50  # the producer's changes to the jobs not pending were checked
    assert seen["holding"] > 0  # pending jobs held GPUs (QueueTree charges their holds from the kept count)
    assert seen["given"] > seen["cycles"] // 2 and seen["moved"] > seen["cycles"] // 4  # the producer's changes taken
    seen, report = checked_replay(fractions=True)
    assert seen["sharing"] > 0 and 0 < seen["down"] < seen["cycles"]


def test_cached_engine_decides_as_uncached_on_the_mixed_slice():
    from scheduler.sim.digest import replay_digest
    cluster = load_cluster("philly", scale=0.05)
    cached = replay_digest(cluster, mixed_trace(False), time_limit_factor=1.0)
    uncached = replay_digest(cluster, mixed_trace(False), engine=partial(run_cycle, cache=None), time_limit_factor=1.0)
    assert cached[0] == uncached[0] and cached[2] == uncached[2] > 50
