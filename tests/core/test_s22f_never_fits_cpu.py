"""A job whose CPU or memory can never be packed on the cluster is refused for good (new-user trial 22, G1).

Each task fitting some node is not enough: 5 tasks x 1000 milli-CPU on two 2000-milli-CPU nodes never start (4 fit),
nor do 4096 tasks x 1 milli-CPU on 4000. The engine's static rule (plugins/feasibility.Capacity.host_gang_never_fits)
counts per node how many of a role's tasks fit by GPUs, milli-CPU and memory together, summed over the nodes the
role may use (exact for one role), then the milli-CPU and memory of all roles' minimums together against the nodes
they may use (never wrong). A job that fits is never refused; a job asking no CPU or memory keeps the GPU rule's
answer. The forecast then says "can never start", once (G2: never_fits_queue_quota's words said it already)."""
from __future__ import annotations

import pytest

from scheduler.core import DomainInfo, NodeInfo, never_fits
from scheduler.core.testing import World, check_result, role
from scheduler.forecast import forecast


def _nodes(count=2, gpus=2, cpu=2000, mem=0, flavor="H200", prefix="n"):
    return [NodeInfo(name=f"{prefix}{i}", flavor=flavor, gpus=gpus, domain="d", cpu_milli=cpu, memory_mib=mem)
            for i in range(count)]


DOMAINS = [DomainInfo("d", 1, None)]


@pytest.mark.parametrize("roles, code, words", [
    ([role(name="w", tasks=5, gpus_per_task=0, cpu_milli=1000)], "never_fits_cpu_gang",
     "role w: needs 5 x 1000 milli-CPU at once, the cluster's nodes hold at most 4 such tasks"),
    ([role(name="w", tasks=4096, gpus_per_task=0, cpu_milli=1)], "never_fits_cpu_gang",
     "role w: needs 4096 x 1 milli-CPU at once, the cluster's nodes hold at most 4000 such tasks"),
    # a min_available below tasks is what must fit at once
    ([role(name="w", tasks=9, min_available=5, gpus_per_task=0, cpu_milli=1000)], "never_fits_cpu_gang",
     "needs 5 x 1000 milli-CPU at once"),
    # each task fits a node by CPU alone and by GPUs alone, the gang only on 4 nodes' worth: 3 x 1500 milli-CPU
    ([role(name="w", tasks=3, gpus_per_task=1, cpu_milli=1500)], "never_fits_cpu_gang",
     "role w: needs 3 x 1500 milli-CPU at once, the cluster's nodes hold at most 2 such tasks"),
    # two roles, each fits alone, not together: 5000 milli-CPU asked of 4000
    ([role(name="a", tasks=2, gpus_per_task=0, cpu_milli=1000), role(name="b", tasks=3, gpus_per_task=0,
                                                                      cpu_milli=1000)],
     "never_fits_cpu_gang", "the job's minimum needs 5000 milli-CPU in all, the nodes its roles may use have 4000"),
])
def test_a_gang_the_nodes_cpu_can_never_hold_never_fits(roles, code, words):
    reason = never_fits(_nodes(), DOMAINS, roles)
    assert reason is not None and reason.code == code and reason.terminal, reason
    assert words in reason.message


def test_memory_and_the_resources_together():
    nodes = _nodes(cpu=0, mem=10000)
    reason = never_fits(nodes, DOMAINS, [role(name="m", tasks=3, gpus_per_task=0, cpu_milli=1, memory_mib=6000)])
    assert reason.code == "never_fits_memory_gang" and reason.terminal
    assert "needs 3 x 6000 MiB of memory at once, the cluster's nodes hold at most 2 such tasks" in reason.message
    # one node rich in CPU, one in memory: by CPU alone 2 fit, by memory alone 2, together 1 (never 2)
    mixed = [NodeInfo(name="c", flavor="H200", gpus=0, domain="d", cpu_milli=8000, memory_mib=1000),
             NodeInfo(name="m", flavor="H200", gpus=0, domain="d", cpu_milli=1000, memory_mib=8000)]
    reason = never_fits(mixed, DOMAINS, [role(name="r", tasks=2, gpus_per_task=0, cpu_milli=1000, memory_mib=1000)])
    assert reason is None  # each node holds one: exactly 2
    reason = never_fits(mixed, DOMAINS, [role(name="r", tasks=3, gpus_per_task=0, cpu_milli=1000, memory_mib=1000)])
    assert reason.code == "never_fits_host_gang" and "hold at most 2 such tasks" in reason.message


@pytest.mark.parametrize("roles", [
    [role(name="w", tasks=4, gpus_per_task=0, cpu_milli=1000)],  # exactly the cluster's
    [role(name="w", tasks=4000, gpus_per_task=0, cpu_milli=1)],
    [role(name="w", tasks=9, min_available=4, gpus_per_task=0, cpu_milli=1000)],  # its minimum fits
    [role(name="w", tasks=4, gpus_per_task=1, cpu_milli=1000)],
    [role(name="a", tasks=2, gpus_per_task=0, cpu_milli=1500), role(name="b", tasks=2, gpus_per_task=0,
                                                                     cpu_milli=500)],  # a + b on each node
    [role(name="w", tasks=4, gpus_per_task=1)],  # no CPU asked: the GPU rule alone
])
def test_a_gang_that_fits_is_not_refused(roles):
    assert never_fits(_nodes(), DOMAINS, roles) is None


def test_an_unconstrained_node_or_another_flavor_counts_as_the_rule_says():
    # a node reporting no CPU (cpu_milli 0) holds any number of tasks: the job may fit
    nodes = _nodes() + [NodeInfo(name="free", flavor="H200", gpus=2, domain="d")]
    assert never_fits(nodes, DOMAINS, [role(name="w", tasks=50, gpus_per_task=0, cpu_milli=1000)]) is None
    # a CPU-only role restricted to a flavor counts only that flavor's nodes, and says so
    nodes = _nodes() + _nodes(count=4, flavor="cpu", gpus=0, prefix="c")
    assert never_fits(nodes, DOMAINS, [role(name="w", tasks=8, gpus_per_task=0, cpu_milli=1000)]) is None
    reason = never_fits(nodes, DOMAINS, [role(name="w", tasks=5, gpus_per_task=0, cpu_milli=1000, flavors=["H200"])])
    assert reason.code == "never_fits_cpu_gang" and "the H200 nodes hold at most 4 such tasks" in reason.message
    # a GPU role runs on its flavor's nodes only: the CPU nodes do not hold its tasks
    reason = never_fits(nodes, DOMAINS, [role(name="g", tasks=3, gpus_per_task=1, cpu_milli=1500)])
    assert reason.code == "never_fits_cpu_gang" and "the H200 nodes hold at most 2" in reason.message


def _demo_world() -> World:
    w = World().nodes(count=2, gpus=2, flavor="H200", cpu_milli=2000).queue(name="q", quota={"H200": 4})
    w.job(name="cpu5", tasks=5, gpus_per_task=0, cpu_milli=1000)
    w.job(name="cpu4", tasks=4, gpus_per_task=0, cpu_milli=1000, submit=1.0)
    return w


def test_the_engine_marks_it_terminal_and_runs_what_fits():
    w = _demo_world()
    snapshot = w.snapshot()
    result = w.cycle()
    check_result(snapshot, result)
    reason = result.pending["cpu5"]
    assert reason.code == "never_fits_cpu_gang" and reason.terminal
    assert [b.job_id for b in result.bindings] == ["cpu4"]


def test_the_forecast_says_can_never_start_once():
    out = forecast(_demo_world().snapshot(), lambda job, el: 600.0, horizon=7 * 86400.0)
    assert out.no_estimate["cpu5"] == ("can never start: role worker: needs 5 x 1000 milli-CPU at once, the "
                                       "cluster's nodes hold at most 4 such tasks")


def test_the_forecast_says_can_never_start_once_for_a_quota_refusal():
    """G2: never_fits_queue_quota's words begin "can never start:" already: the submit form read "no estimate: can
    never start: can never start: needs 128 philly-gpu GPUs; ..."."""
    w = World().nodes(count=1, gpus=8).queue(name="z", quota={"H100": 2}).queue(name="o", quota={"H100": 6})
    w.job(name="np", queue="z", tasks=1, gpus_per_task=4, preemptible=False)
    words = forecast(w.snapshot(), lambda job, el: 600.0, horizon=86400.0).no_estimate["np"]
    assert words.startswith("can never start: needs 4 H100 GPUs; ") and words.count("can never start") == 1
