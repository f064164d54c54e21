"""Quality against baselines (issue #7 item 5): one Philly trace slice, one cluster, three policies.

    python benchmarks/baselines.py [--quick] [--start DAYS] [--days DAYS]

Policies, all through `scheduler.sim.replay.replay` (same trace, same cluster, same run):
  (a) kube-like: FIFO, pod by pod, no gang (pods bind and hold GPUs while siblings wait), least
      allocated spread: `scheduler.core.baselines.run_cycle_kube` with
      CycleConfig(binpack=False, topology=False, fair_share=False, backfill=False, preemption=False,
      reclaim=False);
  (b) gang + binpack without topology: run_cycle with CycleConfig(topology=False);
  (c) the full policy: run_cycle with CycleConfig().

Slice: the Philly file has ~70 arrivals in its first 19.5 days, so the default slice is the busy
window from day 20 (start_days=20) for 14 days (quick: 2 days), importer defaults otherwise
(scale 0.25 = 624 GPUs, compress 1). The replay stops at the end of the slice (`until`), so every
figure covers the slice only (queueing: jobs that started in it; `pending at end` counts the rest). Figures: time-weighted allocation rate and fragmentation rate,
largest runnable job over time (time-weighted mean and a daily series, tier 2 = one leaf switch and the
top tier), queueing p50 / p99 by job size, and the share of multi-node jobs placed inside one tier-1 /
tier-2 domain (Philly's tier-1 domains are single machines, so multi-node jobs are never inside one).
For (a), GPUs held by pods whose siblings wait count as allocated (they are, and they do no work).
"""
from __future__ import annotations

import argparse
import sys
import time

import _common as C
from functools import partial

from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.baselines import run_cycle_kube

KUBE = CycleConfig(binpack=False, topology=False, fair_share=False, backfill=False, preemption=False, reclaim=False)
POLICIES = (
    ("a_kube_like", run_cycle_kube, KUBE),
    ("b_gang_binpack_no_topology", run_cycle, CycleConfig(topology=False)),
    ("c_full", run_cycle, CycleConfig()),
)


class Recorder:
    """Wraps an engine: keeps each cycle's metrics (time series) and each job's final placement tier."""

    every_cycle = True  # the replay calls it every cycle, a settled one too (Replay.settled): a point each

    def __init__(self, engine):
        self.engine = engine
        self.gang = getattr(engine, "gang", True)
        self.series: list[tuple[float, dict]] = []
        self.nodes: dict = {}  # job id -> set of node names bound so far
        self.tasks: dict = {}  # job id -> tasks bound so far
        self.final: dict = {}  # job id -> (tier of the common domain, distinct nodes) once complete

        self.chains: dict = {}  # node name -> its domains, lowest first (from the first snapshot)
        self.tier: dict = {}

    def common_tier(self, nodes) -> int:
        """Tier of the lowest domain holding every node (where the tasks landed, whatever the engine
        searched), or one above the top tier when no domain holds them all."""
        chains = [self.chains.get(n, ()) for n in nodes]
        common = set(chains[0]).intersection(*chains[1:]) if chains else set()
        return min((self.tier[d] for d in common), default=max(self.tier.values(), default=0) + 1)

    def __call__(self, snapshot, config):
        if not self.chains:
            parent = {d.name: d.parent for d in snapshot.domains}
            self.tier = {d.name: d.tier for d in snapshot.domains}
            for n in snapshot.nodes:
                chain, d = [], n.domain
                while d is not None and d not in chain:
                    chain.append(d)
                    d = parent.get(d)
                self.chains[n.name] = tuple(chain)
        result = self.engine(snapshot, config)
        m = result.metrics
        self.series.append((snapshot.now, {"alloc": m.get("allocation_rate", 0.0), "frag": m.get("fragmentation_rate", 0.0),
                                           "largest": dict(m.get("largest_runnable", {})), "free": m.get("free_gpus", 0)}))
        want = {j.id: sum(r.tasks for r in j.roles) for j in snapshot.jobs if j.state == "pending"} if result.bindings else {}
        for b in result.bindings:
            nodes = self.nodes.setdefault(b.job_id, set())
            nodes.update(t.node for t in b.tasks)
            self.tasks[b.job_id] = self.tasks.get(b.job_id, 0) + len(b.tasks)
            if self.tasks[b.job_id] >= want.get(b.job_id, 0):
                self.final[b.job_id] = (self.common_tier(nodes), len(nodes))
                self.nodes.pop(b.job_id, None)
                self.tasks.pop(b.job_id, None)
        return result


def _time_weighted(series, end: float, key) -> float:
    total = span = 0.0
    for (t, m), (t2, _) in zip(series, [*series[1:], (end, None)]):
        dt = max(0.0, t2 - t)
        total += key(m) * dt
        span += dt
    return total / span if span else 0.0


def daily(series, start: float, end: float, key) -> list:
    """Time-weighted mean of key per day of the slice."""
    out = []
    day = 86400.0
    d0 = start
    while d0 < end:
        d1 = min(end, d0 + day)
        pts = [(max(t, d0), m) for t, m in series if t < d1]
        if pts:
            last_before = [p for p in pts if p[0] <= d0]
            seg = ([(d0, last_before[-1][1])] if last_before else []) + [p for p in pts if p[0] > d0]
            out.append(round(_time_weighted(seg, d1, key), 1))
        d0 = d1
    return out


def run_policy(name, engine, config, cluster, trace, until: float | None = None) -> dict:
    if engine is run_cycle:  # each run keeps its engine cache, as the production cycle and the replay do
        engine = partial(run_cycle, cache=EngineCache())
    rec = Recorder(engine)
    t0 = time.perf_counter()
    from scheduler.sim.replay import replay

    rep = replay(cluster, trace, config=config, engine=rec, until=until)
    wall = time.perf_counter() - t0
    top = max((t for _, m in rec.series for t in m["largest"]), default=3)
    end = rep.sim_end
    multi = [(tier, n) for tier, n in rec.final.values() if n > 1]
    out = {
        "wall_seconds": wall, "cycles": rep.cycles, "jobs_submitted": rep.jobs_submitted,
        "jobs_started": rep.jobs_started, "jobs_pending_at_end": rep.jobs_pending_at_end,
        "pending_by_code": rep.pending_by_code,
        "allocation_rate": rep.mean_allocation_rate, "fragmentation_rate": rep.mean_fragmentation_rate,
        "largest_runnable_mean": {f"tier{t}": _time_weighted(rec.series, end, lambda m, t=t: m["largest"].get(t, 0))
                                  for t in sorted({t for _, m in rec.series for t in m["largest"]})},
        "largest_runnable_daily_tier2": daily(rec.series, rep.sim_start, end, lambda m: m["largest"].get(2, 0)),
        "largest_runnable_daily_top": daily(rec.series, rep.sim_start, end, lambda m: m["largest"].get(top, 0)),
        "queueing": rep.queueing, "queueing_by_size": rep.queueing_by_size,
        "multi_node_jobs": len(multi),
        "multi_node_in_tier1": sum(1 for tier, _ in multi if tier <= 1) / len(multi) if multi else None,
        "multi_node_in_tier2": sum(1 for tier, _ in multi if tier <= 2) / len(multi) if multi else None,
        "topology_alignment": rep.topology_alignment, "evictions_by_rule": rep.evictions_by_rule,
        "engine_mean_ms": rep.engine_mean_ms,
    }
    return out


def _h(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 3600:.1f} h"


def table(results: dict) -> str:
    names = list(results)
    rows = [("allocation rate", lambda r: f"{r['allocation_rate']:.1%}"),
            ("fragmentation rate", lambda r: f"{r['fragmentation_rate']:.1%}"),
            ("jobs started / pending at end", lambda r: f"{r['jobs_started']} / {r['jobs_pending_at_end']}"),
            ("multi-node jobs", lambda r: str(r["multi_node_jobs"])),
            ("  inside one tier-1 / tier-2 domain", lambda r: "-" if r["multi_node_in_tier2"] is None else
             f"{r['multi_node_in_tier1']:.0%} / {r['multi_node_in_tier2']:.0%}")]
    rows += [(f"largest runnable (mean), {k}", lambda r, k=k: f"{r['largest_runnable_mean'].get(k, 0):.0f} GPUs")
             for k in results[names[0]]["largest_runnable_mean"]]
    buckets = sorted({b for r in results.values() for b in r["queueing_by_size"]},
                     key=lambda b: (len(b) > 1 and b[0].isdigit(), b))
    order = ["1", "2-4", "5-8", "9-32", "33-128", ">128"]
    buckets = [b for b in order if b in buckets]
    rows.append(("queueing p50 / p99, all", lambda r: f"{_h(r['queueing']['p50'])} / {_h(r['queueing']['p99'])}"))
    for b in buckets:
        rows.append((f"queueing p50 / p99, {b} GPUs", lambda r, b=b: (
            f"{_h(r['queueing_by_size'][b]['p50'])} / {_h(r['queueing_by_size'][b]['p99'])} "
            f"(n={r['queueing_by_size'][b]['count']})") if b in r["queueing_by_size"] else "-"))
    lines = ["| | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for label, f in rows:
        lines.append(f"| {label} | " + " | ".join(f(results[n]) for n in names) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--start", type=float, default=20.0, help="slice start, replay days")
    ap.add_argument("--days", type=float, default=None, help="slice length in days (default 14, quick 4)")
    args = ap.parse_args(argv)
    from clusterspec.importers import load_cluster, load_trace

    days = args.days or (0.5 if args.tiny else 2.0 if args.quick else 14.0)
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=args.start, until_days=args.start + days)
    results = {}
    for name, engine, config in POLICIES:
        results[name] = run_policy(name, engine, config, cluster, trace, until=days * 86400.0)
        r = results[name]
        print(f"{name}: {r['wall_seconds']:.1f} s wall, alloc {r['allocation_rate']:.1%}, frag "
              f"{r['fragmentation_rate']:.1%}, started {r['jobs_started']}, pending {r['jobs_pending_at_end']}", flush=True)
    out = {"machine": C.machine(), "mode": "tiny" if args.tiny else "quick" if args.quick else "full",
           "command": "python benchmarks/baselines.py " + " ".join(argv or sys.argv[1:]),
           "slice": {"start_days": args.start, "days": days, "jobs": len(trace.jobs), "cluster_gpus": cluster.gpus},
           "results": results}
    out["table"] = table(results)
    print(out["table"])
    if not args.tiny:
        C.save(f"baselines_{out['mode']}", out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
