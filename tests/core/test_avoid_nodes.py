"""JobInfo.avoid_nodes (an exclude_node diagnosis, docs/diagnosis.md): the engine places the job elsewhere
when anything else fits, on an avoided node only when nothing else does."""
from scheduler.core.testing import World


def world(**job):
    w = World()
    for name in ("a", "b", "c"):
        w.node(name=name, gpus=8)
    return w.queue(name="q", quota={"H100": 64}).job(name="j", queue="q", tasks=1, gpus_per_task=8, **job)


def test_the_avoided_node_is_left_when_another_fits():
    (plain,) = world().cycle().bindings
    assert plain.tasks[0].node == "a"  # binpacking in name order picks a without the exclusion
    (b,) = world(avoid_nodes=["a"]).cycle().bindings
    assert b.tasks[0].node == "b"
    (b,) = world(avoid_nodes=["a", "b"]).cycle().bindings
    assert b.tasks[0].node == "c"


def test_the_avoided_node_is_used_when_nothing_else_fits():
    w = world(avoid_nodes=["a"])
    w.node(name="b", gpus=8, used=8).node(name="c", gpus=8, used=4)
    (b,) = w.cycle().bindings
    assert b.tasks[0].node == "a"


def test_avoiding_leaves_the_other_jobs_and_the_free_gpus_untouched():
    """The trial holds the avoided nodes' GPUs only for the job's own attempt: the next job still gets them."""
    w = world(avoid_nodes=["a", "b", "c"])
    w.job(name="k", queue="q", tasks=2, gpus_per_task=8, submit=1.0)
    result = w.cycle()
    placed = {b.job_id: sorted(t.node for t in b.tasks) for b in result.bindings}
    assert placed["j"] == ["a"] and placed["k"] == ["b", "c"]
