"""A holder's failed search kept across cycles (actions/allocate.py Admission._recalled, issue 16): a job holding a
reservation tries to start elsewhere every cycle; when its search failed last cycle with the same arguments on the
same state (the same nodes but for their usage, ClusterState.epoch, and the same free GPUs in order, CPU and memory),
the answer is reused without a search, and a lazy hold is kept rather than given back and taken again.

Checked here: every reused answer equals the search run again on the state as the search would see it (the hold
given back), and a Philly slice replayed with and without the reuse decides alike (its report, every field but
timings); the epoch changes with a node's fixed fields, not with its usage."""
from __future__ import annotations

from dataclasses import asdict, replace

from clusterspec.importers import load_cluster, load_trace
from scheduler.core import EngineCache
from scheduler.core.actions import allocate as allocate_module
from scheduler.core.state import ClusterState
from scheduler.core.testing import World
from scheduler.sim.replay import replay

_SLICE = dict(start_days=30.0, until_days=31.5)


def _report(rep) -> dict:
    skip = ("wall", "_ms", "seconds_cpu", "timing")

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not any(s in str(k) for s in skip)}
        return x
    return strip(asdict(rep))


def test_a_reused_answer_is_the_search_s_answer_and_the_replay_decides_alike(monkeypatch) -> None:
    real = allocate_module.Admission._recalled
    seen = {"reused": 0, "searched": 0}

    def checked(self, job, flavor, cap, need, room, shape, backfill_open):
        last = self.recall[0].get(id(job))
        lazy = self.opening is not None
        outcome = real(self, job, flavor, cap, need, room, shape, backfill_open)
        if last is not None and self.recall[1].get(id(job)) is last:  # reused: search again as the search would
            seen["reused"] += 1
            session = self.session
            assert lazy == (self.opening is not None)  # a lazy hold kept (not given back)
            if lazy:
                session.holds.release(job.id)
            moves = session.state.moves
            again = session.search(job, flavor, cap=cap, need=need, room=room, shape=shape)
            assert again == outcome and session.state.moves == moves
            if lazy:
                session.holds.retake(job.id)
        else:
            seen["searched"] += 1
        return outcome

    cluster = load_cluster("philly")
    monkeypatch.setattr(allocate_module.Admission, "_recalled", checked)
    with_reuse = replay(cluster, load_trace("philly", **_SLICE))
    assert seen["reused"] > 10 and seen["searched"] > 10

    def plain(self, job, flavor, cap, need, room, shape, backfill_open):  # the search every time
        if self.opening is not None:
            opening, self.opening = self.opening, None
            opening()
        return self.session.search(job, flavor, cap=cap, need=need, room=room, shape=shape)

    monkeypatch.setattr(allocate_module.Admission, "_recalled", plain)
    without = replay(cluster, load_trace("philly", **_SLICE))
    assert _report(with_reuse) == _report(without)


def test_the_epoch_names_the_nodes_but_for_their_usage() -> None:
    w = World().nodes(count=2, gpus=8, flavor="A10", prefix="n")
    snapshot = w.snapshot()
    cache = EngineCache()

    def epoch(nodes) -> int:
        state = ClusterState(replace(snapshot, nodes=tuple(nodes)), cache=cache)
        cache.settle()  # the lent capacity back (no cycle ran on it)
        return state.epoch

    nodes = list(snapshot.nodes)
    first = epoch(nodes)
    assert epoch(nodes) == first  # the same node objects
    nodes[0] = replace(nodes[0], used=frozenset({0, 1}), cpu_used=0)
    assert epoch(nodes) == first  # its usage alone
    nodes[1] = replace(nodes[1], unhealthy=frozenset({3}))
    changed = epoch(nodes)
    assert changed != first
    nodes[1] = replace(nodes[1], state="cordoned")
    assert epoch(nodes) not in (first, changed)
    assert ClusterState(snapshot).epoch is None  # no cache: no epoch (nothing reused)
