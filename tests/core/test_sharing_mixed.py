"""Mixed jobs (issue 14: one kind per role, roles of different kinds in one job): the engine places the whole-GPU
roles, the sharing pass the fractional / MIG roles, as one gang (all roles or none, min_available kept); quotas
count both; the replay's state binds and releases them."""
from __future__ import annotations

from scheduler.core import JobInfo, NodeInfo, QuotaInfo, RoleInfo, TaskPlacement, run_cycle
from scheduler.core.sharing import FULL
from scheduler.sim.state import ClusterState

from test_sharing import H200_MEM, bound, job, mixed_node, snap


def mixed(jid, *, whole_tasks=1, whole_gpus=2, share_tasks=2, milli=500, mig="", share_min=None, submit=0.0,
          queue="q", priority=0, state="pending", placement=()) -> JobInfo:
    """Role "trainer": whole_tasks x whole_gpus whole GPUs; role "infer": share_tasks tasks of `milli` thousandths
    of a GPU (or of one `mig` instance each)."""
    roles = (RoleInfo("trainer", whole_tasks, whole_gpus, whole_tasks),
             RoleInfo("infer", share_tasks, 1, share_tasks if share_min is None else share_min,
                      gpu_milli=0 if mig else milli, mig_profile=mig))
    return JobInfo(id=jid, queue=queue, roles=roles, submit_time=submit, priority=priority, state=state,
                   placement=placement)


def by_role(binding):
    out: dict[str, list[TaskPlacement]] = {}
    for t in binding.tasks:
        out.setdefault(t.role, []).append(t)
    return out


def test_mixed_job_is_one_binding_each_role_on_its_own_kind_of_gpu():
    r = run_cycle(snap([mixed_node()], [mixed("fr"), mixed("mg", mig="1g.18gb", share_tasks=3, submit=1)]))
    b = bound(r)
    assert set(b) == {"fr", "mg"} and not r.pending
    fr, mg = by_role(b["fr"]), by_role(b["mg"])
    assert all(set(t.gpus) <= {4, 5, 6, 7} and not t.gpu_milli for t in fr["trainer"] + mg["trainer"])
    assert {g for t in fr["trainer"] + mg["trainer"] for g in t.gpus} == {4, 5, 6, 7}  # no GPU twice
    assert [t.gpu_milli for t in fr["infer"]] == [500, 500] and all(t.gpus[0] in (0, 1) for t in fr["infer"])
    assert len({u for t in mg["infer"] for u in t.mig}) == 3 and all(t.gpus == (3,) for t in mg["infer"])


def test_mixed_job_is_all_or_nothing_when_its_shares_do_not_fit():
    # 5 x 0.5 GPU do not fit the 2 shared GPUs: the trainer's whole GPUs are given back, nothing is bound
    r = run_cycle(snap([mixed_node()], [mixed("m", share_tasks=5)]))
    assert "m" not in bound(r) and r.pending["m"].code == "no_share"
    # with min_available 3 of the 5, the gang starts with 4 shares (all that fit) and its trainer
    r = run_cycle(snap([mixed_node()], [mixed("m", share_tasks=5, share_min=3)]))
    roles = by_role(bound(r)["m"])
    assert len(roles["trainer"]) == 1 and len(roles["infer"]) == 4


def test_mixed_job_waits_whole_when_its_whole_roles_do_not_fit():
    r = run_cycle(snap([mixed_node()], [mixed("m", whole_tasks=2, whole_gpus=4, share_tasks=1), job("f", milli=999, submit=1)]))
    b = bound(r)
    assert "m" not in b and r.pending["m"].code in ("insufficient_gpus", "no_packing", "no_domain")
    assert "f" in b  # nothing of m holds a share: a later fraction takes the shared GPU


def test_withdrawn_whole_gpus_of_a_mixed_job_serve_fractions_on_auto_gpus():
    # one node of 4 auto GPUs: m's trainer takes 4, its 1 x 0.5 share finds no GPU left, so m is withdrawn;
    # the fraction behind it then gets an auto GPU (the withdrawn GPUs are free again)
    node = NodeInfo(name="a", flavor="T4", gpus=4, gpu_modes=("auto",) * 4)
    r = run_cycle(snap([node], [mixed("m", whole_gpus=4, share_tasks=1), job("f", milli=300, submit=1)]))
    b = bound(r)
    assert "m" not in b and r.pending["m"].code == "no_share" and "f" in b


def test_mixed_job_quota_counts_whole_gpus_and_fractions_together():
    quotas = {"H200": QuotaInfo(0, 3, 3)}
    r = run_cycle(snap([mixed_node()], [mixed("m", whole_gpus=2, share_tasks=3, milli=400)], quotas))
    # 2 + 1.2 > 3 whatever the cluster holds: terminal, as for a whole-GPU job above its limit
    assert "m" not in bound(r) and r.pending["m"].code == "never_fits_queue_limit" and r.pending["m"].terminal
    assert "3.2" in r.pending["m"].message
    r = run_cycle(snap([mixed_node()], [mixed("m", whole_gpus=2, share_tasks=2, milli=400), job("f", milli=300, submit=1)],
                       quotas))
    b = bound(r)
    assert "m" in b and "f" not in b and r.pending["f"].code == "quota"  # 2 + 0.8 + 0.3 > 3


def test_running_mixed_job_holds_its_gpus_and_its_queue_usage_next_cycle():
    running = mixed("m", state="running", placement=(
        TaskPlacement("trainer", 0, "mixed", (4, 5)),
        TaskPlacement("infer", 0, "mixed", (0,), gpu_milli=500, gpu_memory_mib=H200_MEM // 2),
        TaskPlacement("infer", 1, "mixed", (0,), gpu_milli=500, gpu_memory_mib=H200_MEM // 2)))
    node = mixed_node()
    node = NodeInfo(**{**{f: getattr(node, f) for f in node.__dataclass_fields__}, "used": frozenset({4, 5})})
    jobs = [running, job("w", gpus=2), job("f", milli=600, submit=1), job("g", milli=500, submit=2)]
    r = run_cycle(snap([node], jobs, {"H200": QuotaInfo(0, 6, 6)}))
    b = bound(r)
    assert set(b["w"].tasks[0].gpus) == {6, 7}  # 4 and 5 are m's trainer's
    assert b["f"].tasks[0].gpus == (1,)  # GPU 0 is full with m's two halves
    assert "g" not in b and r.pending["g"].code == "no_share"  # 0.4 left on GPU 1, nothing on GPU 0
    r = run_cycle(snap([node], jobs, {"H200": QuotaInfo(0, 5, 5)}))
    b = bound(r)  # m 2 + 1 and w 2 fill the limit of 5: f waits on its quota though GPU 1 is free
    assert "w" in b and "f" not in b and r.pending["f"].code == "quota"
    # with a limit of 4 the whole-GPU engine sees m's fractions too: 3 used, w's 2 GPUs would make 5
    r = run_cycle(snap([node], jobs, {"H200": QuotaInfo(0, 4, 4)}))
    assert "w" not in bound(r) and r.pending["w"].code == "queue_limit"


def test_replay_state_binds_and_releases_a_mixed_job():
    node = mixed_node()
    state = ClusterState.from_infos((node,), (), snap([node], []).queues)
    state.submit(mixed("m"))
    r = run_cycle(state.snapshot(0.0))
    state.bind(bound(r)["m"], 0.0)
    assert state.used_gpus == 2 and sum(state.shares.values()) == 2 * 500
    s = state.snapshot(1.0)
    assert s.nodes[0].used == frozenset({4, 5}) and s.jobs[0].state == "running"
    # the next cycle sees the running mixed job: a 4-GPU job still fits on 6, 7? no: only 2 exclusive left
    r = run_cycle(snap(s.nodes, [*s.jobs, job("w", gpus=4)]))
    assert "w" not in bound(r)
    state.release("m")
    assert state.used_gpus == 0 and not state.shares and state.queue_used["q"] == 0


def test_sim_state_refuses_a_whole_task_on_a_shared_gpu():
    node = NodeInfo(name="a", flavor="T4", gpus=2, gpu_modes=("auto", "auto"))
    state = ClusterState.from_infos((node,), (), snap([node], []).queues)
    state.submit(mixed("m", whole_gpus=1, share_tasks=1, milli=FULL // 2))
    from scheduler.core import Binding
    bad = Binding("m", (TaskPlacement("trainer", 0, "a", (0,)), TaskPlacement("infer", 0, "a", (0,), gpu_milli=500)), "", 0)
    try:
        state.bind(bad, 0.0)
    except AssertionError as e:
        assert "fraction" in str(e) or "held whole" in str(e)
    else:
        raise AssertionError("a GPU both whole and shared was accepted")
