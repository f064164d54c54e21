"""GPU sharing in the engine (scheduler/core/sharing.py, issue 14): fractions packed by the FGD score, MIG
instances bound once, whole-GPU tasks kept off shared and MIG GPUs, quotas counted in GPU-equivalents and MIG
resources, the snapshot left unchanged."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from scheduler.core import (
    CycleConfig, JobInfo, MigInstance, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement, run_cycle,
)
from scheduler.core.sharing import FULL, fragment, mig_resource, workload_mix, workload_of

H200_MEM = 143_771


def mixed_node(name: str = "mixed") -> NodeInfo:
    """8 GPUs: 0-1 shared, 2-3 MIG (2 x 3g.71gb on GPU 2, 7 x 1g.18gb on GPU 3), 4-7 exclusive."""
    mig = (MigInstance(2, f"MIG-{name}-2a", "3g.71gb", 71_680, 3), MigInstance(2, f"MIG-{name}-2b", "3g.71gb", 71_680, 3),
           *(MigInstance(3, f"MIG-{name}-3{k}", "1g.18gb", 17_920, 1) for k in range(7)))
    return NodeInfo(name=name, flavor="H200", gpus=8, gpu_modes=("shared", "shared", "mig", "mig") + ("exclusive",) * 4,
                    gpu_memory_mib=H200_MEM, mig=mig)


def job(jid, *, queue="q", tasks=1, gpus=1, milli=0, mem=0, mig="", submit=0.0, min_available=None, state="pending",
        placement=()) -> JobInfo:
    role = RoleInfo("worker", tasks, gpus, tasks if min_available is None else min_available, gpu_milli=milli,
                    gpu_memory_mib=mem, mig_profile=mig)
    return JobInfo(id=jid, queue=queue, roles=(role,), submit_time=submit, state=state, placement=placement)


def snap(nodes, jobs, quotas=None) -> Snapshot:
    queues = (QueueInfo("q", quotas=quotas or {}),)
    return Snapshot(nodes=tuple(nodes), queues=queues, jobs=tuple(jobs))


def bound(result):
    return {b.job_id: b for b in result.bindings}


def test_mixed_node_each_kind_lands_on_its_own_gpus():
    s = snap([mixed_node()], [job("whole", gpus=4, submit=0), job("half", milli=500, submit=1),
                              job("mem", mem=40_000, submit=2), job("mig1", mig="1g.18gb", gpus=3, submit=3),
                              job("mig3", mig="3g.71gb", gpus=2, submit=4)])
    b = bound(run_cycle(s))
    assert set(b) == {"whole", "half", "mem", "mig1", "mig3"}
    assert set(b["whole"].tasks[0].gpus) == {4, 5, 6, 7}
    assert b["half"].tasks[0].gpus[0] in (0, 1) and b["half"].tasks[0].gpu_milli == 500
    t = b["mem"].tasks[0]
    assert t.gpus[0] in (0, 1) and t.gpu_memory_mib == 40_000 and t.gpu_milli == -(-40_000 * FULL // H200_MEM)
    # FGD: the mix is {0.5 GPU, 4 GPUs}; 0.28 GPU next to the 0.5 would leave 0.22 no 0.5 task can use,
    # on the other shared GPU it leaves 0.72 (a 0.5 still fits): the fragment grows less there
    assert b["half"].tasks[0].gpus != t.gpus
    assert b["mig1"].tasks[0].gpus == (3,) and len(set(b["mig1"].tasks[0].mig)) == 3
    assert b["mig3"].tasks[0].gpus == (2,) and len(b["mig3"].tasks[0].mig) == 2


def test_whole_gpu_job_never_takes_shared_or_mig_gpus():
    s = snap([mixed_node()], [job("big", gpus=5)])
    r = run_cycle(s)
    assert "big" not in bound(r) and "big" in r.pending  # only 4 exclusive GPUs


def test_shared_gpu_never_over_committed_and_mig_instance_bound_once():
    jobs = [job(f"f{i}", milli=400, submit=i) for i in range(6)] + [job(f"m{i}", mig="3g.71gb", submit=10 + i) for i in range(3)]
    r = run_cycle(snap([mixed_node()], jobs))
    b = bound(r)
    per_gpu = defaultdict(int)
    for jid in b:
        for t in b[jid].tasks:
            if t.gpu_milli:
                per_gpu[t.gpus[0]] += t.gpu_milli
    assert max(per_gpu.values()) <= FULL
    assert sum(1 for j in b if j.startswith("f")) == 4  # two per shared GPU (0.4 + 0.4; a third would be 1.2)
    assert sum(1 for j in b if j.startswith("m")) == 2 and r.pending["m2"].code == "no_share"


def test_running_shares_are_respected_next_cycle():
    running = job("run", milli=700, state="running",
                  placement=(TaskPlacement("worker", 0, "mixed", (0,), gpu_milli=700, gpu_memory_mib=H200_MEM * 7 // 10),))
    r = run_cycle(snap([mixed_node()], [running, job("a", milli=500), job("b", milli=300, submit=1)]))
    b = bound(r)
    assert b["a"].tasks[0].gpus == (1,)  # 0.5 does not fit next to 0.7
    assert b["b"].tasks[0].gpus == (0,)  # 0.3 fills GPU 0 exactly (FGD: no fragment left)


def test_auto_gpus_take_whole_tasks_only_while_free_of_fractions():
    node = NodeInfo(name="a", flavor="T4", gpus=2, gpu_modes=("auto", "auto"))
    frac = job("frac", milli=250, state="running", placement=(TaskPlacement("worker", 0, "a", (0,), gpu_milli=250),))
    r = run_cycle(snap([node], [frac, job("whole", gpus=2, submit=1)]))
    assert "whole" not in bound(r)  # GPU 0 holds a fraction: not whole any more
    r = run_cycle(snap([node], [frac, job("whole", gpus=1, submit=1)]))
    assert bound(r)["whole"].tasks[0].gpus == (1,)
    r = run_cycle(snap([node], [job("whole", gpus=1), job("frac", milli=250, submit=1)]))
    b = bound(r)
    assert b["whole"].tasks[0].gpus != b["frac"].tasks[0].gpus


def test_fraction_stays_off_the_whole_gpus_a_pending_gang_needs():
    # node a: 4 free auto GPUs, exactly what the pending 4-GPU job (blocked by quota? no: by a 5th) needs;
    # node b: one GPU already shared. The fraction goes to b even though the whole job cannot start now.
    a = NodeInfo(name="a", flavor="T4", gpus=4, gpu_modes=("auto",) * 4)
    b = NodeInfo(name="b", flavor="T4", gpus=2, gpu_modes=("auto",) * 2, used=frozenset({1}))
    held = job("held", milli=500, state="running", placement=(TaskPlacement("worker", 0, "b", (0,), gpu_milli=500),))
    gang = job("gang", tasks=2, gpus=4)  # needs 2 x 4 GPUs: cannot start, but node a's 4 stay whole for it
    r = run_cycle(snap([a, b], [held, gang, job("frac", milli=250, submit=1)]))
    assert bound(r)["frac"].tasks[0].node == "b"


def test_quota_counts_fractions_as_gpu_equivalents_and_mig_as_its_own_resource():
    quotas = {"H200": QuotaInfo(0, 1, 1), mig_resource("H200", "1g.18gb"): QuotaInfo(0, 2, 2)}
    jobs = [job("f1", milli=600), job("f2", milli=300, submit=1), job("f3", milli=200, submit=2),
            job("m", mig="1g.18gb", gpus=3, submit=3), job("m2", mig="1g.18gb", gpus=2, submit=4)]
    r = run_cycle(snap([mixed_node()], jobs, quotas))
    b = bound(r)
    assert {"f1", "f2", "m2"} <= set(b) and "f3" not in b and "m" not in b
    assert r.pending["f3"].code == "quota" and "H200" in r.pending["f3"].message
    # 3 instances above a limit of 2: it can never run in this queue (terminal), like a whole-GPU job
    assert r.pending["m"].code == "never_fits_queue_limit" and r.pending["m"].terminal
    assert "needs 3 H200/mig-1g.18gb MIG instances, above queue q limit of 2" in r.pending["m"].message


def test_gang_of_fractions_is_all_or_nothing():
    node = NodeInfo(name="s", flavor="T4", gpus=1, gpu_modes=("shared",))
    r = run_cycle(snap([node], [job("g", tasks=3, milli=400)]))
    assert "g" not in bound(r) and r.pending["g"].code == "no_share"
    r = run_cycle(snap([node], [job("g", tasks=3, milli=400, min_available=2)]))
    assert len(bound(r)["g"].tasks) == 2


def test_fgd_fragment_formula():
    mix = [(0.5, 500, 1, 0), (0.5, FULL, 1, 0)]
    # one GPU 0.3 free, one wholly free: for the 0.5 type 300 is a fragment; for the whole type 300 too
    assert fragment((300, 1000), 1, None, mix) == 0.5 * 300 + 0.5 * 300
    # nothing wholly free: the whole type cannot run, all 600 free is a fragment for it
    assert fragment((300, 300), 0, None, mix) == 0.5 * 600 + 0.5 * 600
    # CPU too small for every type: everything free is a fragment
    assert fragment((1000,), 1, None, [(1.0, 500, 1, 4000)]) == 0 and fragment((1000,), 1, 0, [(1.0, 500, 1, 4000)]) == 1000
    assert workload_mix([job("a", milli=500), job("b", gpus=2)]) == [(0.5, 500, 1, 0), (0.5, FULL, 2, 0)]


def test_fgd_whole_places_one_task_whole_jobs_by_the_score():
    # node a: GPU 0 holds 0.5, GPU 1 free; node b: 2 free GPUs. The mix is {0.5 GPU, 1 GPU}. A 1-GPU job on b
    # leaves a's half GPU usable by the 0.5 type and b one whole GPU: no fragment grows. On a it would take the
    # only whole GPU next to the half one: still no fragment for either type. Tie: the node left with fewer
    # wholly free GPUs (a). A 2-GPU job fits only b.
    a = NodeInfo(name="a", flavor="T4", gpus=2, gpu_modes=("auto", "auto"))
    b = NodeInfo(name="b", flavor="T4", gpus=2, gpu_modes=("auto", "auto"))
    half = job("half", milli=500, state="running", placement=(TaskPlacement("worker", 0, "a", (0,), gpu_milli=500),))
    r = run_cycle(snap([a, b], [half, job("one", gpus=1), job("two", gpus=2, submit=1)]), CycleConfig(fgd_whole=True))
    got = bound(r)
    assert got["one"].tasks[0].node == "a" and got["one"].tasks[0].gpus == (1,) and got["one"].rule == "fgd"
    assert got["two"].tasks[0].node == "b"
    # off: the engine's binpack places them (rule allocate), never on GPU 0 of a (it holds a fraction)
    r = run_cycle(snap([a, b], [half, job("one", gpus=1)]))
    assert bound(r)["one"].rule == "allocate" and (bound(r)["one"].tasks[0].node, bound(r)["one"].tasks[0].gpus) != ("a", (0,))


def test_expected_workload_steers_the_fgd_score():
    # GPU 0 holds 0.4 (0.6 free), GPU 1 is free; a 0.3 task arrives. With the snapshot's own mix {0.4, 0.3} both
    # types still fit after it on GPU 1 (0.6 and 0.7 left): no fragment grows there, on GPU 0 the 0.3 left is a
    # fragment for the 0.4 type. With an expected workload of 0.7 tasks only (Snapshot.workload), GPU 0's 0.6 is a
    # fragment already and the task fills it (the fragment shrinks), while on GPU 1 it would leave no 0.7 room.
    n = NodeInfo(name="n", flavor="T4", gpus=2, gpu_modes=("shared", "shared"))
    held = job("held", milli=400, state="running", placement=(TaskPlacement("worker", 0, "n", (0,), gpu_milli=400),))
    s = snap([n], [held, job("new", milli=300)])
    assert bound(run_cycle(s))["new"].tasks[0].gpus == (1,)
    expected = workload_of([job("a", milli=700), job("b", milli=700)])
    assert expected == ((700, 1, 0, 2.0),)
    assert workload_mix(s.jobs, expected) == [(1.0, 700, 1, 0)]
    assert bound(run_cycle(replace(s, workload=expected)))["new"].tasks[0].gpus == (0,)


# -- properties ---------------------------------------------------------------------------------------

request = st.one_of(
    st.tuples(st.just("whole"), st.integers(1, 4)),
    st.tuples(st.just("milli"), st.integers(1, 999)),
    st.tuples(st.just("mem"), st.integers(1_000, 140_000)),
    st.tuples(st.just("mig"), st.sampled_from(["1g.18gb", "3g.71gb"])),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(request, st.integers(1, 3)), min_size=1, max_size=14),
       limit=st.integers(1, 6), rounds=st.integers(1, 3), fgd_whole=st.booleans())
def test_properties_over_cycles(reqs, limit, rounds, fgd_whole):
    nodes = [mixed_node("m1"), mixed_node("m2"),
             NodeInfo(name="t", flavor="H200", gpus=4, gpu_modes=("auto",) * 4, gpu_memory_mib=H200_MEM)]
    jobs = []
    for i, ((kind, v), tasks) in enumerate(reqs):
        kw = {"whole": {"gpus": v}, "milli": {"milli": v}, "mem": {"mem": v}, "mig": {"mig": v}}[kind]
        jobs.append(job(f"j{i}", tasks=tasks, submit=float(i), **kw))
    quotas = {"H200": QuotaInfo(0, limit, limit)}
    s = snap(nodes, jobs, quotas)
    by_node = {n.name: n for n in nodes}
    for _ in range(rounds):
        before = repr(s)
        r = run_cycle(s, CycleConfig(fgd_whole=fgd_whole))
        assert repr(s) == before  # the snapshot is never mutated
        placed = {j.id: j for j in s.jobs if j.state == "running"}
        new = []
        for bnd in r.bindings:
            j = next(x for x in s.jobs if x.id == bnd.job_id)
            assert len(bnd.tasks) >= j.roles[0].effective_min  # gang
            new.append(replace(j, state="running", placement=bnd.tasks))
        alljobs = list(placed.values()) + new
        share, mem, whole, mig = defaultdict(int), defaultdict(int), set(), []
        eq = 0.0
        for j in alljobs:
            for t in j.placement:
                n = by_node[t.node]
                if t.mig:
                    mig += list(t.mig)
                    assert all(n.gpu_modes[g] == "mig" for g in t.gpus)
                elif t.gpu_milli:
                    share[(t.node, t.gpus[0])] += t.gpu_milli
                    mem[(t.node, t.gpus[0])] += t.gpu_memory_mib
                    assert n.gpu_modes[t.gpus[0]] in ("shared", "auto")
                    eq += t.gpu_milli / FULL
                else:
                    for g in t.gpus:
                        assert n.gpu_modes[g] in ("exclusive", "auto")  # never on a shared or MIG GPU
                        assert (t.node, g) not in whole
                        whole.add((t.node, g))
                    eq += len(t.gpus)
        assert all(v <= FULL for v in share.values())
        assert all(v <= H200_MEM for v in mem.values())
        assert not (whole & set(share))  # no GPU is whole and shared at once
        assert len(mig) == len(set(mig))  # MIG instances never double-bound
        fractional = sum(t.gpu_milli for j in alljobs for t in j.placement if t.gpu_milli) / FULL
        assert fractional <= limit + 1e-9  # fractions never take the queue over its H200 limit
        s = replace(s, jobs=tuple(alljobs) + tuple(j for j in s.jobs if j.state == "pending" and j.id not in {b.job_id for b in r.bindings}))


def test_a_fraction_counts_in_the_rates_of_the_cycle_that_places_it():
    """Section-6 rates with sharing: the auto GPU a fraction lands on is allocated and no longer free (not
    whole) in the same cycle's metrics, not one cycle later."""
    node = NodeInfo(name="a", flavor="T4", gpus=4, gpu_modes=("auto",) * 4)
    r = run_cycle(snap([node], [job("frac", milli=500)]))
    assert bound(r)["frac"].tasks[0].gpu_milli == 500
    assert (r.metrics["allocated_gpus"], r.metrics["free_gpus"]) == (1, 3)
    assert r.metrics["allocation_rate"] == 0.25
