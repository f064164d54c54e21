"""Property tests of GPU sharing over several cycles with mixed jobs (whole-GPU and sharing roles in one gang),
two queues, priorities and evictions (issue 14): no GPU over-committed in share or memory, counting the shares
held for eviction beneficiaries; whole-GPU tasks never on a shared or MIG GPU nor on a GPU holding a share; MIG
instances never double-bound; gangs all or nothing in every role; no queue's running usage (whole GPUs +
GPU-equivalents) above its limit; evictions only of preemptible jobs, each for a beneficiary that is held; the
snapshot never mutated."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings, strategies as st

from scheduler.core import CycleConfig, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, run_cycle
from scheduler.core.sharing import FULL

from test_sharing import H200_MEM, mixed_node

share = st.one_of(
    st.tuples(st.just("milli"), st.integers(100, 900)),
    st.tuples(st.just("mem"), st.integers(10_000, 140_000)),
    st.tuples(st.just("mig"), st.sampled_from(["1g.18gb", "3g.71gb"])),
)
spec = st.tuples(
    st.sampled_from([None, None, None, 1, 2]),  # whole GPUs per task of a whole-GPU role (None: no such role)
    st.one_of(st.none(), share),  # the sharing role's kind (None: no such role)
    st.integers(1, 3),  # tasks of the sharing role
    st.sampled_from(["a", "b"]),  # queue
    st.integers(0, 2),  # priority (plus the arrival round: later jobs tend to preempt)
    st.booleans(),  # preemptible
    st.integers(0, 3),  # the round it arrives in
)


def make_job(i: int, whole, kind, tasks, queue, priority, preemptible, _arrival=0) -> JobInfo | None:
    roles = []
    if whole is not None:
        roles.append(RoleInfo("trainer", 1, whole, 1))
    if kind is not None:
        k, v = kind
        kw = {"milli": {"gpu_milli": v}, "mem": {"gpu_memory_mib": v}, "mig": {"mig_profile": v}}[k]
        roles.append(RoleInfo("infer", tasks, 1, max(1, tasks - 1), **kw))
    if not roles:
        return None
    return JobInfo(id=f"j{i}", queue=queue, roles=tuple(roles), priority=priority + _arrival, preemptible=preemptible,
                   submit_time=float(i))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(spec, min_size=1, max_size=16), limits=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       rounds=st.integers(2, 4))
def test_mixed_jobs_and_evictions_keep_every_rule(specs, limits, rounds):
    base = [mixed_node("m1"),
            NodeInfo(name="t", flavor="H200", gpus=4, gpu_modes=("auto",) * 4, gpu_memory_mib=H200_MEM)]
    by_node = {n.name: n for n in base}
    queues = tuple(QueueInfo(q, quotas={"H200": QuotaInfo(0, 3, lim)}) for q, lim in zip("ab", limits))
    limit = dict(zip("ab", limits))
    arrivals = {f"j{i}": sp[-1] for i, sp in enumerate(specs)}
    later = {j.id: j for j in (make_job(i, *sp) for i, sp in enumerate(specs)) if j is not None}
    jobs: dict = {}
    for rnd in range(rounds):
        jobs.update({jid: j for jid, j in later.items() if arrivals[jid] == rnd})
        running = [j for j in jobs.values() if j.state == "running"]
        used = defaultdict(set)
        for j in running:
            for t in j.placement:
                if not t.gpu_milli and not t.mig:
                    used[t.node].update(t.gpus)
        nodes = tuple(replace(n, used=frozenset(used[n.name])) for n in base)
        s = Snapshot(nodes=nodes, queues=queues, jobs=tuple(jobs.values()), now=float(rnd))
        before = repr(s)
        r = run_cycle(s, CycleConfig())
        assert repr(s) == before
        # evictions take effect at once (no grace here): victims back to pending, holds set on their holders
        held = {n.job_id: n.tasks for n in r.nominations}
        event(f"evictions: {bool(r.evictions)}")  # --hypothesis-show-statistics: about a quarter of examples
        event(f"mixed bound: {any(len(jobs[b.job_id].roles) > 1 for b in r.bindings)}")
        for e in r.evictions:
            victim = jobs[e.job_id]
            assert victim.state == "running" and victim.preemptible and e.beneficiary in held
            jobs[e.job_id] = replace(victim, state="pending", placement=(), start_time=None)
        for b in r.bindings:
            j = jobs[b.job_id]
            assert j.state == "pending"
            for role in j.roles:  # the gang: every role's minimum, in one binding
                assert sum(1 for t in b.tasks if t.role == role.name) >= role.effective_min
            jobs[b.job_id] = replace(j, state="running", placement=b.tasks, start_time=float(rnd), reserved=())
        for jid, j in jobs.items():
            if j.state == "pending":
                jobs[jid] = replace(j, reserved=held.get(jid, ()))
        # every rule, over running tasks and held ones
        milli, memory, whole, mig = defaultdict(int), defaultdict(int), set(), []
        usage = defaultdict(float)
        for j in jobs.values():
            tasks = j.placement if j.state == "running" else j.reserved
            for t in tasks:
                n = by_node[t.node]
                if t.mig:
                    mig += list(t.mig)
                    assert all(n.gpu_modes[g] == "mig" for g in t.gpus)
                elif t.gpu_milli:
                    milli[(t.node, t.gpus[0])] += t.gpu_milli
                    memory[(t.node, t.gpus[0])] += t.gpu_memory_mib
                    assert n.gpu_modes[t.gpus[0]] in ("shared", "auto")
                    if j.state == "running":
                        usage[j.queue] += t.gpu_milli / FULL
                else:
                    for g in t.gpus:
                        assert n.gpu_modes[g] in ("exclusive", "auto")
                        assert (t.node, g) not in whole, f"GPU {t.node}/{g} bound twice"
                        whole.add((t.node, g))
                    if j.state == "running":
                        usage[j.queue] += len(t.gpus)
        assert all(v <= FULL for v in milli.values())
        assert all(v <= H200_MEM for v in memory.values())
        assert not (whole & set(milli)), "a GPU whole and shared at once"
        assert len(mig) == len(set(mig)), "a MIG instance bound twice"
        for q, u in usage.items():
            assert u <= limit[q] + 1e-9, f"queue {q} over its limit: {u} > {limit[q]}"
