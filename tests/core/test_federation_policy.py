"""scheduler.core.federation: the dispatcher's filter, score and choice (issue #22), and the worker summary."""
from __future__ import annotations

from scheduler.core.federation import (
    ClusterView, FlavorState, JobRequest, QueueShare, Weights, choose, first_to_admit, least_loaded, quota_class,
    reject_reason, round_robin, score, should_withdraw, summarize, view_from_summary,
)
from scheduler.core.snapshot import DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement


def cluster(name, *, free=64, total=64, node=8, domains=None, share=None, labels=None, cost=0.0, pending=0,
            healthy=True, flavor="H100"):
    return ClusterView(name=name, flavors={flavor: FlavorState(total, free, node, domains or {1: 16, 2: total},
                                                               {1: min(free, 16), 2: free})},
                       queues={"alpha": {flavor: share or QueueShare(guarantee=32, quota=48, limit=64)}},
                       pending_gpus=pending, labels=labels or {}, cost_per_gpu_hour=cost, healthy=healthy)


def job(gpus=8, task=8, **kw):
    return JobRequest(id=1, queue="alpha", gpus=gpus, task_gpus=task, **kw)


def test_filter_reasons_name_the_rule():
    assert reject_reason(job(), cluster("a", healthy=False)) == "not healthy"
    assert reject_reason(job(clusters=("b",)), cluster("a")) == "not in the job's clusters"
    assert "label region=eu" in reject_reason(job(selector={"region": "eu"}), cluster("a", labels={"region": "us"}))
    assert reject_reason(job(selector={"region": "eu"}), cluster("a", labels={"region": "eu"})) is None
    assert "needs 128 GPUs" in reject_reason(job(gpus=128), cluster("a"))
    assert "fits no node" in reject_reason(job(gpus=16, task=16), cluster("a", node=8))
    assert "no tier-1 domain" in reject_reason(job(gpus=32, highest_tier=1), cluster("a"))
    assert reject_reason(job(gpus=32, highest_tier=2), cluster("a")) is None
    assert "limit is 16" in reject_reason(job(gpus=32), cluster("a", share=QueueShare(8, 16, 16)))
    assert reject_reason(job(flavors=("A100",)), cluster("a")).startswith("none of the job's flavors")
    no_queue = ClusterView("a", flavors=cluster("a").flavors, queues={})
    assert reject_reason(job(), no_queue) == "no queue alpha"


def test_quota_class_guarantee_quota_borrowed():
    s = QueueShare(guarantee=8, quota=16, limit=64, used=4)
    assert quota_class(s, 4) == "guarantee"
    assert quota_class(s, 12) == "quota"
    assert quota_class(s, 13) == "borrowed"
    assert quota_class(None, 1) == "borrowed"


def test_sooner_start_wins_and_forecast_overrides_backlog():
    busy = cluster("busy", free=0, pending=64)
    idle = cluster("idle")
    d = choose(job(), [busy, idle])
    assert d.cluster == "idle" and d.candidates[0].wait == 0.0 and d.candidates[1].wait > 0
    # the member's what-if says "busy" starts it now and "idle" in an hour: the forecast decides
    d = choose(job(), [busy, idle], {"busy": 0.0, "idle": 3600.0})
    assert d.cluster == "busy" and d.candidates[0].estimated


def test_guaranteed_quota_beats_borrowing_at_equal_start():
    guaranteed = cluster("g", share=QueueShare(guarantee=16, quota=16, limit=64, used=0))
    borrowed = cluster("b", share=QueueShare(guarantee=0, quota=0, limit=64, used=0))
    d = choose(job(), [borrowed, guaranteed])
    assert d.cluster == "g"
    parts = {c.cluster: c for c in d.candidates}
    assert parts["g"].quota_class == "guarantee" and parts["b"].quota_class == "borrowed"
    assert parts["b"].total - parts["g"].total == Weights().borrowed_s
    # but a borrowed start two hours sooner is worth more than the reclaim risk's weight (1 h)
    assert choose(job(), [borrowed, guaranteed], {"b": 0.0, "g": 7200.0}).cluster == "b"


def test_data_site_and_cost_break_ties():
    near = cluster("near", labels={"data-site": "lyon"}, cost=3.0)
    far = cluster("far", labels={"data-site": "oslo"}, cost=1.0)
    assert choose(job(data_site="lyon"), [far, near]).cluster == "near"
    assert choose(job(), [far, near]).cluster == "far"  # no data site: the cheaper one
    c = score(job(), near, "H100")
    assert c.cost == 3.0 * 8 * Weights().seconds_per_currency


def test_no_cluster_fits_lists_every_reason_and_choice_is_stable():
    d = choose(job(gpus=1000), [cluster("a"), cluster("b")])
    assert d.cluster is None and set(d.rejected) == {"a", "b"}
    same = [cluster("b"), cluster("a")]
    assert choose(job(), same).cluster == "a"  # equal scores: by name, whatever the order


def test_withdraw_needs_timeout_and_a_clearly_better_cluster():
    cur = score(job(), cluster("a", free=0, pending=64), "H100")
    better = score(job(), cluster("b"), "H100")
    assert not should_withdraw(100, 600, cur, better)
    assert should_withdraw(700, 600, cur, better)
    assert not should_withdraw(700, 600, better, cur)
    same = score(job(), cluster("c", free=0, pending=64), "H100")
    assert not should_withdraw(700, 600, cur, same)  # no ping-pong between equals
    assert should_withdraw(700, 600, None, better)


def test_baselines_share_the_filter():
    cs = [cluster("a", free=8), cluster("b", free=40), cluster("c", healthy=False)]
    assert first_to_admit(job(), cs) == ["a", "b"]
    assert least_loaded(job(), cs) == "b"
    assert [round_robin(job(), cs, t) for t in range(3)] == ["a", "b", "a"]


def test_summarize_reads_the_snapshot_and_round_trips():
    doms = (DomainInfo("spine", 3), DomainInfo("leaf", 2, "spine"), DomainInfo("nv0", 1, "leaf"),
            DomainInfo("nv1", 1, "leaf"))
    nodes = (NodeInfo("n0", "H100", 8, "nv0", used=frozenset(range(8))), NodeInfo("n1", "H100", 8, "nv0"),
             NodeInfo("n2", "H100", 8, "nv1", unhealthy=frozenset({0})), NodeInfo("n3", "H100", 8, "nv1", state="not_ready"))
    running = JobInfo(1, "alpha", (RoleInfo("w", 1, 8, 1),), state="running",
                      placement=(TaskPlacement("w", 0, "n0", tuple(range(8))),))
    pending = JobInfo(2, "alpha", (RoleInfo("w", 2, 4, 2),))
    snap = Snapshot(nodes=nodes, domains=doms, jobs=(running, pending),
                    queues=(QueueInfo("alpha", quotas={"H100": QuotaInfo(8, 16, 24)}),))
    s = summarize(snap)
    h = s["flavors"]["H100"]
    assert h["total"] == 31 and h["free"] == 8 + 7  # n1 all, n2 minus its bad GPU; n0 used, n3 not ready
    assert h["domain_gpus"] == {"1": 16, "2": 31, "3": 31} and h["largest_free"]["1"] == 8
    assert s["queues"]["alpha"]["H100"] == {"guarantee": 8, "quota": 16, "limit": 24, "used": 8}
    assert (s["pending_jobs"], s["pending_gpus"], s["running_jobs"]) == (1, 8, 1)
    v = view_from_summary("x", s, labels={"region": "eu"})
    assert v.flavors["H100"].domain_gpus[1] == 16 and v.queues["alpha"]["H100"].used == 8
    assert reject_reason(job(gpus=24, highest_tier=1), v).endswith("(largest 16)")
