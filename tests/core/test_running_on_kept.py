"""QueueTree.running_on from the running tasks per node kept across cycles (issue 16, plugins/quota._RunningKept):
over many random snapshots (running and preempting jobs of known and unknown queues coming and going, jobs of
several tasks on one node, a job changing state as a new object, the same objects passed again, the queues
changing, whole new job objects as a platform builds them), every answer, and the holds of pending jobs charged
to their queues (QueueTree.held and usage, with the kept GPUs per flavor of a holder whose nodes no running job came
to or left), equal those of a QueueTree without a memo; with the removal of the jobs that left
taken out, or a holder's stamp blind to the nodes' changes, the same sequence finds wrong answers."""
from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from scheduler.core.jobindex import JobCounts, with_facts
from scheduler.core.plugins import quota
from scheduler.core.plugins.quota import QueueTree
from scheduler.core.snapshot import JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement

NODES = tuple(NodeInfo(name=f"n{i}", flavor="A", gpus=8) for i in range(8))


def _queues(rng: random.Random) -> tuple[QueueInfo, ...]:
    names = [q for q in "abcd" if rng.random() < 0.8] or ["a"]
    return tuple(QueueInfo(q, quotas={"A": QuotaInfo(0, 8, None)}) for q in names)


def _job(rng: random.Random, serial: int, free: dict) -> JobInfo | None:
    tasks = []
    for index in range(rng.choice([1, 1, 1, 2, 3])):
        node = rng.choice(NODES).name
        gpus = free[node][:rng.randint(0, 3)]
        del free[node][:len(gpus)]
        tasks.append(TaskPlacement("w", index, node, tuple(gpus)))
    return JobInfo(id=f"j{serial}", queue=rng.choice("abcde"), roles=(RoleInfo("w", len(tasks), 1, 1),),
                   state=rng.choice(["running", "running", "running", "preempting"]), placement=tuple(tasks))


def _holder(rng: random.Random, serial: int) -> JobInfo:
    tasks = tuple(TaskPlacement("w", i, rng.choice(NODES).name, tuple(sorted(rng.sample(range(8), rng.randint(1, 8)))))
                  for i in range(rng.randint(1, 3)))
    return JobInfo(id=f"h{serial}", queue=rng.choice("abcde"), roles=(RoleInfo("w", len(tasks), 1, 1),),
                   reserved=tasks)


def _run(rng: random.Random, steps: int) -> tuple[int, int, int]:
    """(answers compared, wrong answers, cycles answered from the kept index)."""
    memo: dict = {}
    queues = _queues(rng)
    live: list[JobInfo] = []
    free = {n.name: list(range(8)) for n in NODES}
    serial = compared = wrong = indexed = held = 0
    holders = [_holder(rng, h) for h in range(4)]  # pending jobs holding GPUs (QueueTree charges their holds)
    before: dict = {}  # id -> job of the jobs not pending in the previous snapshot
    last = None  # its token
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.05:
            queues = _queues(rng)
        elif roll < 0.08:  # every object new (a platform's snapshot)
            live = [replace(j) for j in live]
        for _ in range(rng.randint(0, 3)):  # jobs leave
            if live:
                job = live.pop(rng.randrange(len(live)))
                for t in job.placement:
                    free[t.node].extend(t.gpus)
        for _ in range(rng.randint(0, 2)):  # a job changes state: a new object
            if live:
                i = rng.randrange(len(live))
                live[i] = replace(live[i], state="preempting" if live[i].state == "running" else "running")
        for _ in range(rng.randint(0, 3)):
            serial += 1
            live.append(_job(rng, serial, free))
        if rng.random() < 0.2:  # a holder's hold moves (a new object), or another holder comes
            holders[rng.randrange(len(holders))] = _holder(rng, serial)
        pending = tuple(holders) + (JobInfo(id="p", queue="a", roles=(RoleInfo("w", 1, 1, 1),)),)
        # the producer's changes since its previous snapshot (by identity, in no particular order)
        now_ids = {id(j): j for j in live}
        came = [j for i, j in now_ids.items() if i not in before]
        gone = [j for i, j in before.items() if i not in now_ids]
        token = object()
        roll = rng.random()
        changes = None if roll < 0.05 else (object(), token, came, gone) if roll < 0.1 else (last, token, came, gone)
        counts = JobCounts()
        for j in (*live, *pending):
            counts.add(j)
        jobs = with_facts([*live, *pending], counts, len(live), unique_ids=True, live_changes=changes)
        before, last = now_ids, token
        if rng.random() < 0.05:
            jobs = tuple(jobs)  # a plain tuple (no changes handed: the one-pass answer)
        snapshot = Snapshot(nodes=NODES, queues=queues, jobs=jobs)
        for _ in range(2 if rng.random() < 0.1 else 1):  # sometimes the same snapshot twice
            kept = QueueTree(snapshot, memo=memo, facts=SimpleNamespace(running_gpus=None, holding=None))
            fresh = QueueTree(snapshot)
            # the holds charged at snapshot time (their GPUs no running job occupies): the same usage and holds
            wrong += kept.held != fresh.held
            wrong += {q: dict(u) for q, u in kept.usage.items()} != {q: dict(u) for q, u in fresh.usage.items()}
            held += len(kept.held)
            for _ in range(rng.randint(0, 3)):  # cycles that ask nothing, one ask, several
                asked = rng.sample([n.name for n in NODES], rng.randint(1, 4))
                got, want = kept.running_on(asked), fresh.running_on(asked)
                for n in asked:
                    compared += 1
                    wrong += got[n] != want[n]
            indexed += isinstance(kept._kept_running, quota._RunningKept)
    assert held > 1000
    return compared, wrong, indexed


def test_kept_running_on_equals_the_one_pass_answer() -> None:
    compared, wrong, indexed = _run(random.Random(7), 600)
    assert wrong == 0
    assert compared > 1500 and indexed > 300


def test_an_index_that_keeps_jobs_that_left_goes_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    original = quota._RunningKept.apply

    def forgetful(self, came, gone, known) -> None:  # the jobs that left stay indexed
        original(self, came, (), known)

    monkeypatch.setattr(quota._RunningKept, "apply", forgetful)
    _, wrong, _ = _run(random.Random(7), 600)
    assert wrong > 0


def test_a_stamp_blind_to_the_nodes_goes_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quota._RunningKept, "stamp", lambda self, tasks: (self.epoch,))
    _, wrong, _ = _run(random.Random(7), 600)
    assert wrong > 0
