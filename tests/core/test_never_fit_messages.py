"""Messages that name the rule that fails (new-user trial 3, items 5 and 6): a gang refused because its tasks
do not pack onto the nodes (one node per task) says so instead of "needs N GPUs ... largest holds M" with
M >= N; a whole-GPU gang short of free GPUs says how many more idle GPUs are in mode shared or mig."""
from __future__ import annotations

from scheduler.core import JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, never_fits, run_cycle


def nodes(*sizes):
    return tuple(NodeInfo(name=f"n{i}", flavor="H200", gpus=g) for i, g in enumerate(sizes))


def role(tasks, gpus):
    return RoleInfo("worker", tasks, gpus, tasks)


def test_tasks_that_need_more_big_nodes_than_exist_name_the_nodes():
    cluster = nodes(8, 8, 4, 4, 4, 4)  # 32 GPUs, 2 nodes of 8
    reason = never_fits(cluster, (), (role(3, 8),))
    assert reason is not None and reason.terminal and reason.code == "never_fits_domain"
    assert reason.message == ("can never fit: role worker: 3 tasks of 8 H200 GPUs (each task on one node) need "
                              "3 nodes with 8 or more GPUs; this cluster has 2")
    # several tasks per node: the slots are named
    reason = never_fits(cluster, (), (role(9, 3),))  # 27 GPUs <= 32, but 2x2 + 4x1 = 8 slots of 3 GPUs
    assert reason.message == ("can never fit: role worker: 9 tasks of 3 H200 GPUs (each task on one node) need "
                              "room for 9 such tasks; the nodes of this cluster hold at most 8")


def test_not_enough_gpus_keeps_the_total_message_and_a_fitting_job_fits():
    cluster = nodes(8, 8, 4, 4, 4, 4)
    assert never_fits(cluster, (), (role(9, 4),)).message == (
        "can never fit: needs 36 H200 GPUs, this cluster has 32")
    assert never_fits(cluster, (), (role(2, 8),)) is None
    assert never_fits(cluster, (), (role(8, 4),)) is None


def cycle(cluster, jobs):
    queues = (QueueInfo("demo", quotas={"H200": QuotaInfo(0, 64, 64)}),)
    return run_cycle(Snapshot(nodes=tuple(cluster), queues=queues, jobs=tuple(jobs)))


def gang(jid="gang", tasks=4):
    return JobInfo(id=jid, queue="demo", roles=(role(tasks, 1),))


def test_gang_short_of_free_gpus_names_the_shared_gpu():
    cluster = [NodeInfo(name="local-0", flavor="H200", gpus=2, gpu_modes=("shared", "exclusive")),
               NodeInfo(name="local-1", flavor="H200", gpus=2)]
    r = cycle(cluster, [gang()])
    assert not r.bindings
    reason = r.pending["gang"]
    assert reason.code == "insufficient_gpus" and not reason.terminal
    assert reason.message == ("needs 4 H200 GPUs at once; 3 free (+1 in mode shared or mig: it takes fractions "
                              "or MIG instances only, not whole-GPU tasks)")


def test_gang_short_of_free_gpus_without_sharing_keeps_its_message():
    cluster = [NodeInfo(name="a", flavor="H200", gpus=2, used=frozenset({0})), NodeInfo(name="b", flavor="H200", gpus=2)]
    r = cycle(cluster, [gang()])
    assert r.pending["gang"].message == "needs 4 H200 GPUs at once; 3 free"


def test_gang_short_of_free_gpus_names_the_gpus_taking_no_work():
    """New-user trial 22b: a gang waiting for a dead node read "needs 4 H200 GPUs at once; 0 free" (nothing said half
    the cluster was not ready): the GPUs on nodes taking no work now, or unhealthy, are named apart."""
    busy = NodeInfo(name="local-0", flavor="H200", gpus=2, used=frozenset({0, 1}))
    down = NodeInfo(name="local-1", flavor="H200", gpus=2, state="not_ready")
    r = cycle([busy, down], [gang()])
    assert r.pending["gang"].message == ("needs 4 H200 GPUs at once; 0 free (+2 on nodes taking no work now: not "
                                         "ready, draining, cordoned or spare; or unhealthy)")
    sick = NodeInfo(name="local-1", flavor="H200", gpus=2, unhealthy=frozenset({1}))
    shared = NodeInfo(name="local-2", flavor="H200", gpus=2, gpu_modes=("shared", "exclusive"))
    r = cycle([busy, sick, shared], [gang(tasks=6)])
    assert r.pending["gang"].message == (
        "needs 6 H200 GPUs at once; 2 free (+1 in mode shared or mig: it takes fractions or MIG instances only, not "
        "whole-GPU tasks) (+1 on nodes taking no work now: not ready, draining, cordoned or spare; or unhealthy)")
    assert cycle([busy, NodeInfo(name="local-1", flavor="H200", gpus=2)], [gang()]).pending["gang"].message == (
        "needs 4 H200 GPUs at once; 2 free")
