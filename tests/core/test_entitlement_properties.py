"""Property tests of the entitlement rules (docs/quotas.md) on random queue trees, flavors and loads:

- after any cycle, no queue is above its entitlement because of a reclaim: for every reclaim, each level of
  the beneficiary's chain below the ancestor it shares with a victim's queue ends the cycle within its
  entitlement (running jobs not evicted + GPUs held + jobs started, less the jobs that borrowed idle GPUs
  after the reclaims: docs/quotas.md lets any queue borrow an idle GPU, the beneficiary's too; the start
  order is not in the result, so a start is judged after every hold);
- a job within its queue's entitlement for its flavor (on the usage after this cycle's starts that did not
  borrow) never waits while a borrower of that flavor starts: keeping the borrowers that started out of the
  cycle would not let it start (or get a hold) either;
- reclaim never takes a victim's level below its guarantee (those below the ancestor it shares with the
  beneficiary: a move between siblings is their parent's business, trial 21, F16).
(No eviction in a settled world and guarantees over many cycles: tests/core/test_stability.py.)"""
from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.core import run_cycle
from scheduler.core.plugins.quota import QueueTree
from scheduler.core.snapshot import Snapshot
from scheduler.core.testing import World, check_result

FLAVORS = ["H100", "A10"]


@st.composite
def trees(draw):
    """Two or three top-level queues, some with children (quota 0, none, or their own), two flavors, a cluster
    partly full of running jobs (some borrowing), and pending jobs of one flavor each."""
    world = World()
    for f in FLAVORS:
        world.nodes(count=draw(st.integers(1, 3)), gpus=draw(st.sampled_from([4, 8])), flavor=f, prefix=f"{f}-")
    capacity = {f: sum(n.gpus for n in world.node_infos if n.flavor == f) for f in FLAVORS}
    leaves = []
    for t in range(draw(st.integers(2, 3))):
        top = f"t{t}"
        quota = {f: draw(st.integers(0, capacity[f])) for f in FLAVORS if draw(st.sampled_from([True, True, True, False]))}
        guarantee = {f: draw(st.integers(0, q)) for f, q in quota.items()}
        world.queue(name=top, quota=quota or None, guarantee=guarantee or None)
        kids = draw(st.integers(0, 2))
        if not kids:
            leaves.append(top)
        for k in range(kids):
            name = f"{top}c{k}"
            kind = draw(st.sampled_from(["zero", "none", "own"]))
            if kind == "own":
                q = {f: draw(st.integers(0, max(0, quota.get(f, 0)))) for f in FLAVORS}
                world.queue(name=name, parent=top, quota=q, guarantee={f: draw(st.integers(0, v)) for f, v in q.items()})
            elif kind == "zero":
                world.queue(name=name, parent=top, quota={f: 0 for f in FLAVORS})
            else:
                world.queue(name=name, parent=top)
            leaves.append(name)
    r = 0
    for node in world.node_infos:  # running jobs, whole nodes or halves
        for _ in range(draw(st.sampled_from([0, 1, 2, 2, 2]))):
            free = node.gpus - len(world._nodes[node.name].used)
            if free < node.gpus // 2:
                break
            world.running(name=f"run{r}", queue=draw(st.sampled_from(leaves)), nodes=[node.name],
                          gpus_per_task=node.gpus // 2, started=float(r))
            r += 1
    for j in range(draw(st.integers(1, 10))):
        f = draw(st.sampled_from(FLAVORS))
        tasks = draw(st.integers(1, 3))
        world.job(name=f"j{j}", queue=draw(st.sampled_from(leaves)), tasks=tasks,
                  gpus_per_task=draw(st.sampled_from([1, 2, 4, 8])),
                  min_available=draw(st.integers(1, tasks)), flavors=[f], submit=float(j))
    return world


def _after(snapshot: Snapshot, result, *, borrowers_out: bool = False) -> QueueTree:
    """Queue usage at the end of the cycle, growths aside: jobs still running (not evicted), jobs started, and
    GPUs held (every GPU of a hold made this cycle). borrowers_out: the jobs started are charged one by one,
    in order, after the holds, and those that would take some level of their chain past its entitlement
    (borrowers of idle GPUs) are left out."""
    evicted = {e.job_id for e in result.evictions if not e.tasks}
    gone = {(e.job_id, t) for e in result.evictions for t in e.tasks}
    jobs = []
    for j in snapshot.jobs:
        if j.state == "running" and j.id not in evicted:
            jobs.append(replace(j, placement=tuple(t for t in j.placement if (j.id, (t.role, t.index)) not in gone)))
    by_id = {j.id: j for j in snapshot.jobs}
    started = [replace(by_id[b.job_id], state="running", placement=b.tasks) for b in result.bindings]
    for n in result.nominations:
        jobs.append(replace(by_id[n.job_id], state="running", placement=n.tasks))
    if not borrowers_out:
        return QueueTree(replace(snapshot, jobs=tuple(jobs) + tuple(started)))
    tree = QueueTree(replace(snapshot, jobs=tuple(jobs)))
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    for job in started:
        per_flavor = defaultdict(int)
        for t in job.placement:
            per_flavor[flavor_of[t.node]] += len(t.gpus)
        if all(tree.within_entitlement(job.queue, f, gpus) for f, gpus in per_flavor.items()):
            for f, gpus in per_flavor.items():
                tree.charge(job.queue, f, gpus)
    return tree


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_no_queue_above_its_entitlement_because_of_a_reclaim(world):
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    after = _after(snapshot, result, borrowers_out=True)  # the beneficiary side
    full = _after(snapshot, result)  # the victim side: every start counts for its queue
    before = QueueTree(snapshot)
    queue_of = {j.id: j.queue for j in snapshot.jobs}
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    jobs = {j.id: j for j in snapshot.jobs}
    for e in result.evictions:
        if e.rule != "reclaim":
            continue
        event("a reclaim")
        beneficiary, victim = queue_of[e.beneficiary], queue_of[e.job_id]
        flavors = {flavor_of[t.node] for t in jobs[e.job_id].placement}
        for f in flavors:
            for level in after.below_common(beneficiary, victim):
                assert after.usage[level][f] <= after.entitlement(level, f), (
                    f"{level} ends at {after.usage[level][f]} {f} over its entitlement {after.entitlement(level, f)} "
                    f"after a reclaim for {e.beneficiary}")
            # reclaim never takes a level below its guarantee: those of the victim's chain below the shared
            # ancestor (the shared ones are the parent's own business: trial 21, F16)
            for level in after.below_common(victim, beneficiary):
                info = {q.name: q for q in snapshot.queues}[level]
                quota = info.quotas.get(f)
                if quota is not None and before.usage[level][f] >= quota.guarantee:
                    assert full.usage[level][f] >= quota.guarantee, f"{level} taken below its guarantee"


def _within_quota_waiting(snapshot: Snapshot, result) -> tuple[list, set]:
    """(the queues' next pending jobs that did not start, hold nothing, are not refused for good and are within
    their queue's entitlement for their flavor while some other queue started a borrower of it; the ids of the
    jobs that started borrowing). Within is judged on the snapshot's usage plus this cycle's starts that did
    not borrow: those go first, and a sibling's start within the quota of a shared parent can use up the
    parent's entitlement (the job then borrows too, and waits its turn among the borrowers)."""
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    jobs = {j.id: j for j in snapshot.jobs}
    # which bindings borrowed: charged in the order they were made, on top of the snapshot's usage
    tree = QueueTree(snapshot)
    borrowers = defaultdict(set)  # flavor -> queues that started a borrower
    borrower_jobs = set()
    charges = []
    for b in result.bindings:
        job = jobs[b.job_id]
        per_flavor = defaultdict(int)
        for t in b.tasks:
            per_flavor[flavor_of[t.node]] += len(t.gpus)
        for f, gpus in per_flavor.items():
            if not tree.within_entitlement(job.queue, f, gpus):
                borrowers[f].add(job.queue)
                borrower_jobs.add(b.job_id)
            tree.charge(job.queue, f, gpus)
        charges.append((b.job_id, job.queue, per_flavor))
    if not borrower_jobs:
        return [], borrower_jobs
    start = QueueTree(snapshot)
    for job_id, queue, per_flavor in charges:
        if job_id not in borrower_jobs:
            for f, gpus in per_flavor.items():
                start.charge(queue, f, gpus)
    heads = {}
    for j in sorted((j for j in snapshot.jobs if j.state == "pending"), key=lambda j: (j.submit_time, j.id)):
        heads.setdefault(j.queue, j)
    bound = {b.job_id for b in result.bindings}
    held = {n.job_id for n in result.nominations}
    waiting = [j for j in heads.values() if j.id not in bound and j.id not in held and not result.pending[j.id].terminal
               and start.within_entitlement(j.queue, j.roles[0].flavors[0], j.gpus_min)
               and borrowers[j.roles[0].flavors[0]] - {j.queue}]
    return waiting, borrower_jobs


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_a_job_within_quota_never_waits_while_a_borrower_of_its_flavor_starts(world):
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    waiting, borrower_jobs = _within_quota_waiting(snapshot, result)
    if not waiting:
        return
    event("a within-quota job waits while a borrower starts")
    # the same cycle with the borrowers kept out (backed off: still pending, so the fair shares do not move)
    held_back = tuple(replace(j, not_before=snapshot.now + 1) if j.id in borrower_jobs else j for j in snapshot.jobs)
    again = run_cycle(replace(snapshot, jobs=held_back))
    for j in waiting:
        started = j.id in {b.job_id for b in again.bindings} or j.id in {n.job_id for n in again.nominations}
        assert not started, f"{j.id} (within its queue's entitlement) waits while a borrower of its flavor starts"


def _elastic_vs_small(a10_gpus: int, small: int = 1, small_quota: int = 1) -> World:
    """The reduced case of the stored Hypothesis example: queue a (A10 quota 2) has an elastic job of 2 tasks
    x 2 GPUs (min_available 1: 2 GPUs within a's entitlement, the second task would borrow); queue b
    (A10 quota `small_quota`) has a job of `small` GPUs, within its entitlement, submitted later."""
    return (World().nodes(count=1, gpus=a10_gpus, flavor="A10", prefix="A10-")
            .queue(name="a", quota={"A10": 2}).queue(name="b", quota={"A10": small_quota})
            .job(name="elastic", queue="a", tasks=2, gpus_per_task=2, min_available=1, flavors=["A10"], submit=0)
            .job(name="small", queue="b", tasks=1, gpus_per_task=small, flavors=["A10"], submit=1))


def test_elastic_tasks_past_the_entitlement_do_not_take_a_within_quota_jobs_gpus():
    """The elastic job goes first (both queues within their entitlement, a's job submitted first), but its
    second task borrows: it used to take all 4 GPUs at start and leave b's 1-GPU job (within b's quota)
    waiting. The tasks past the entitlement are a borrow: placed after every other job."""
    world = _elastic_vs_small(4)
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    started = {b.job_id: sum(len(t.gpus) for t in b.tasks) for b in result.bindings}
    assert started == {"elastic": 2, "small": 1}


def test_elastic_tasks_past_the_entitlement_start_when_no_within_quota_job_needs_the_gpus():
    """The control: with room for both, the elastic job still takes every task at start (the borrowed task
    is placed once every other job has been tried), in one binding."""
    world = _elastic_vs_small(8)
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    started = {b.job_id: sum(len(t.gpus) for t in b.tasks) for b in result.bindings}
    assert started == {"elastic": 4, "small": 1}
    assert [b.job_id for b in result.bindings] == ["elastic", "small"]


def test_elastic_tasks_past_the_entitlement_wait_while_a_within_quota_job_waits():
    """b's 3-GPU job (within b's quota of 3) cannot start next to the elastic job's 2 GPUs; the elastic job
    does not borrow the 2 GPUs left (b's job would reclaim them at once: the grow rule, docs/quotas.md)."""
    world = _elastic_vs_small(4, small=3, small_quota=3)
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    started = {b.job_id: sum(len(t.gpus) for t in b.tasks) for b in result.bindings}
    assert started == {"elastic": 2}


def test_a_job_within_its_entitlement_on_one_flavor_does_not_borrow_another_ahead_of_a_within_quota_job():
    """b's job may run on H100 or A10 and is within b's entitlement on A10 only; H100 has the most free GPUs,
    so it was tried there first and borrowed an H100 GPU in the walk's first part (b's share is the lowest),
    leaving a's 8-GPU job (within a's H100 quota) 7 free GPUs. It runs on A10, where it does not borrow."""
    world = (World().nodes(count=2, gpus=8, flavor="H100", prefix="H100-")
             .nodes(count=1, gpus=4, flavor="A10", prefix="A10-")
             .queue(name="a", quota={"H100": 16}).queue(name="b", quota={"A10": 1})
             .running(name="r", queue="a", nodes=["H100-2"], gpus_per_task=8)
             .job(name="big", queue="a", tasks=1, gpus_per_task=8, flavors=["H100"], submit=0)
             .job(name="either", queue="b", tasks=1, gpus_per_task=1, flavors=["H100", "A10"], submit=1))
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    where = {b.job_id: {t.node for t in b.tasks} for b in result.bindings}
    assert where == {"big": {"H100-1"}, "either": {"A10-1"}}


def test_a_queue_whose_parent_fills_up_goes_with_the_borrowers():
    """c0 and c1 live on their parent's quota of 4 H100 (no quota of their own); c0's job takes it. c1's 4-GPU
    job then borrows, but c1's place in the queue order was worked out before that charge to the shared
    parent and still said "within": it started ahead of t's 1-GPU job (within t's quota) and took the last 4
    GPUs. A queue's place is checked again when it comes up, so c1 waits for the borrowers' turn."""
    world = (World().nodes(count=1, gpus=8, flavor="H100", prefix="H100-")
             .queue(name="p", quota={"H100": 4}).queue(name="p-c0", parent="p").queue(name="p-c1", parent="p")
             .queue(name="t", quota={"H100": 1})
             .job(name="small", queue="t", tasks=1, gpus_per_task=1, flavors=["H100"], submit=0)
             .job(name="first", queue="p-c0", tasks=1, gpus_per_task=4, flavors=["H100"], submit=1)
             .job(name="second", queue="p-c1", tasks=1, gpus_per_task=4, flavors=["H100"], submit=2))
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    assert {b.job_id for b in result.bindings} == {"first", "small"}


def test_a_job_whose_sibling_used_up_the_parents_quota_is_a_borrower():
    """Why the property judges "within" after this cycle's starts that did not borrow. p (H100 quota 4) has two
    children living on it; c0's 3-GPU job starts within p's quota, so c1's 4-GPU job (within p's quota on the
    snapshot's usage) would now borrow at p: it waits its turn among the borrowers, and o's borrower (o has no
    quota; o sorts first among the borrowers at equal shares) takes 2 of the 5 GPUs left. Without o's job c1's
    would start, so on the snapshot's usage alone the property saw a within-quota job waiting for a borrower."""
    world = (World().nodes(count=2, gpus=4, flavor="H100", prefix="H100-")
             .queue(name="o", quota={"H100": 0}).queue(name="p", quota={"H100": 4})
             .queue(name="p-c0", parent="p").queue(name="p-c1", parent="p")
             .job(name="c0-job", queue="p-c0", tasks=3, gpus_per_task=1, flavors=["H100"], submit=0)
             .job(name="c1-job", queue="p-c1", tasks=1, gpus_per_task=4, flavors=["H100"], submit=1)
             .job(name="o-job", queue="o", tasks=1, gpus_per_task=2, flavors=["H100"], submit=2))
    snapshot = world.snapshot()
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    assert [b.job_id for b in result.bindings] == ["c0-job", "o-job"]
    assert QueueTree(snapshot).within_entitlement("p-c1", "H100", 4)  # within on the snapshot's usage
    assert _within_quota_waiting(snapshot, result) == ([], {"o-job"})
