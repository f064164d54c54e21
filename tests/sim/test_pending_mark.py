"""The replay's pending jobs record what changed between two snapshots (sim/state._Pending.mark, handed to the
engine as FactTuple.pending_changes, issue 16): after random sets, deletions and pops, a mark's jobs that came
(in the dict's order) and went are those a diff of the two lists of jobs gives, or None when a key got another
job in its place."""
from __future__ import annotations

import random

import pytest

from scheduler.core.jobindex import JobCounts
from scheduler.core.snapshot import JobInfo
from scheduler.sim.state import _Pending


def _diff(before: list, after: list) -> tuple[list, set]:
    """(jobs of `after` not in `before`, in order; ids of jobs of `before` not in `after`), by identity."""
    old, new = set(map(id, before)), set(map(id, after))
    return [j for j in after if id(j) not in old], old - new


@pytest.mark.parametrize("seed", range(30))
def test_mark_gives_the_lists_diff(seed):
    rng = random.Random(seed)
    pending = _Pending(JobCounts())
    made = 0

    def job(key):
        nonlocal made
        made += 1
        return JobInfo(id=key, queue="q", roles=(), submit_time=float(made))

    before, marks, in_place = [], 0, 0
    for _ in range(60):
        for _ in range(rng.randrange(6)):
            key = f"j{rng.randrange(12)}"
            op = rng.random()
            if op < 0.45:
                if key in pending and rng.random() < 0.5:
                    pending[key] = pending[key] if rng.random() < 0.3 else job(key)  # the same job, or another
                else:
                    pending[key] = job(key)
            elif key in pending:
                if op < 0.7:
                    del pending[key]
                elif op < 0.9:
                    pending.pop(key)
                else:  # out and back in (moves to the end), the same job
                    held = pending.pop(key)
                    pending[key] = held
            else:
                assert pending.pop(key, None) is None
        after = list(pending.values())
        got = pending.mark()
        came, gone = _diff(before, after)
        if got is None:  # a key kept its place with another job
            in_place += 1
            survivors = {j.id for j in before} & {j.id for j in after}
            assert any(pending[k] is not next(j for j in before if j.id == k) for k in survivors)
        else:
            assert list(map(id, got[0])) == list(map(id, came))
            assert set(map(id, got[1])) == gone and len(got[1]) == len(gone)
            marks += 1
        before = after
    assert marks > 20
