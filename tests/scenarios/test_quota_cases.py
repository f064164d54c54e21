"""Quota cases of ../shared/cases/ that admission decides."""
from scheduler.core.testing import ScenarioRunner, World


def hierarchy_world() -> World:
    """hierarchy-children-exceed-parent.yaml: p limited to 2 GPUs, s0 and s1 with a quota of 1 each."""
    return (World().nodes(count=2, gpus=8)
            .queue(name="p", quota={"H100": 2}, limit={"H100": 2})
            .queue(name="s0", parent="p", quota={"H100": 1})
            .queue(name="s1", parent="p", quota={"H100": 1})
            .job(name="j1", queue="s0", tasks=1, gpus_per_task=2, submit=0)
            .job(name="j2", queue="s1", tasks=1, gpus_per_task=2, submit=1))


def test_hierarchy_children_exceed_parent():
    """p's limit binds s0 and s1 although 14 GPUs are free."""
    result = hierarchy_world().cycle(now=1)
    assert [b.job_id for b in result.bindings] == ["j1"]
    reason = result.pending["j2"]
    assert reason.code == "queue_limit" and "queue p limit" in reason.message
    usage = result.metrics["queue_usage"]
    assert usage["p"]["H100"] == usage["s0"]["H100"] + usage.get("s1", {}).get("H100", 0) == 2
    assert result.metrics["free_gpus"] == 14


def test_hierarchy_no_reclaim_when_not_entitled():
    """j2 alone would take s1 above its quota: it is not entitled to reclaim from s0."""
    runner = ScenarioRunner(hierarchy_world()).run(until=20, every=1)
    assert runner.evictions == [] and set(runner.running) == {"j1"}
    assert "queue p limit" in runner.history[-1][1].pending["j2"].message


def test_job_above_queue_limit_is_terminal_and_never_blocks():
    """reclaim-blocked-by-never-fits.yaml (admission half): w4 asks for more than a's whole limit."""
    world = (World().node(name="n1", gpus=3, flavor="A100")
             .queue(name="a", quota={"A100": 3}, limit={"A100": 3})
             .job(name="w4", queue="a", tasks=1, gpus_per_task=4, submit=1, flavors=["A100"])
             .job(name="w3", queue="a", tasks=1, gpus_per_task=3, submit=2, flavors=["A100"]))
    result = world.cycle(now=2)
    assert [b.job_id for b in result.bindings] == ["w3"]
    assert result.pending["w4"].terminal
