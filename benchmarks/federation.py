"""Federation dispatch in a simulated federation (issue #22): the dispatcher of scheduler.core.federation
against first-to-admit copies (MultiKueue AllAtOnce / Slurm federation), round robin and least loaded.

    python benchmarks/federation.py            # 3 clusters, 3,000 jobs (about 20 s)
    python benchmarks/federation.py --quick    # 600 jobs
    python benchmarks/federation.py --philly --start-day 21 --days 3   # Philly jobs, 624 GPUs split 3 ways

The federation (SIMULATED; --philly takes the jobs from the Philly trace instead, see RESULTS.md): three clusters of
H100 nodes (8 GPUs each) of 256, 128 and 64 GPUs; four teams with a guarantee and a quota on each cluster
(team i's guarantee sits mostly on cluster i mod 3, so "where the team's quota is guaranteed" differs per
team). Jobs: Poisson arrivals at an offered load of ~0.85 of the federation's GPUs, sizes 1/2/4/8/16/32/64
GPUs with a Philly-like mix (most jobs small), log-normal run times (median 30 min). Each cluster runs its
own queue FIFO with backfill (a job starts when its GPUs are free; jobs behind a blocked one may start);
a job above its team's quota on that cluster starts on borrowed GPUs and is RECLAIMED (requeued on the
same cluster, its progress lost) when a team within its quota there needs the GPUs.

Policies: `dispatcher` = choose() on the clusters' state at arrival (backlog rule, no forecast: the
forecast is live-only); `first-to-admit` = a copy in every eligible cluster, the first to start it wins,
the other copies are deleted (a copy started in the same tick elsewhere is a wasted start, counted);
`round-robin`; `least-loaded` (largest free fraction). Figures: mean and p99 queueing time by size, borrowed
starts and reclaims, copies created per job. Then the manager's cost: choose() decisions per second with
10 and 50 clusters, and the bytes of one summary (summarize) of a 624-GPU cluster per minute of syncs.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from scheduler.core.federation import (  # noqa: E402
    ClusterView, FlavorState, JobRequest, QueueShare, choose, first_to_admit, least_loaded, round_robin, summarize,
)

SIZES = (1, 2, 4, 8, 16, 32, 64)
MIX = (0.35, 0.2, 0.15, 0.15, 0.08, 0.05, 0.02)
CAPS = (256, 128, 64)
TEAMS = ("t0", "t1", "t2", "t3")
TICK = 60.0


def world(caps=CAPS, teams=TEAMS, weights=None):
    """Per cluster per team (guarantee, quota): each team's share of a cluster (weights, default equal) is
    its quota there scaled x1.8 on its home cluster (team index mod 3, guarantee = that quota's 0.8) and
    x0.8 elsewhere (guarantee = that quota's 0.5) -- where a team's quota is guaranteed differs per team."""
    weights = weights or {t: 1.0 for t in teams}
    total = sum(weights.values())
    shares = {}
    for c, cap in enumerate(caps):
        for t, team in enumerate(teams):
            home = t % 3 == c
            q = cap * weights[team] / total * (1.8 if home else 0.8)
            shares[(c, team)] = (int(q * (0.8 if home else 0.5)), int(q))
    return shares


def philly_jobs(start_day: float, days: float, max_gpus: int):
    """Philly jobs (ATC '19 trace through clusterspec.importers) submitted in [start_day, start_day + days):
    team = virtual cluster, GPUs = tasks x GPUs per task (jobs above `max_gpus` or of 0 GPUs dropped), run
    time = the trace's duration. Returns (jobs, team weights = each team's GPU-seconds share)."""
    from clusterspec.importers import load_trace

    trace = load_trace("philly")
    lo, hi = start_day * 86400, (start_day + days) * 86400
    out, weight = [], defaultdict(float)
    for i, j in enumerate(trace.jobs):
        gpus = j.tasks * j.gpus_per_task
        if not lo <= j.submit < hi or gpus <= 0 or gpus > max_gpus:
            continue
        out.append({"id": i, "team": j.queue, "gpus": gpus, "submit": j.submit - lo, "run": max(60.0, j.duration)})
        weight[j.queue] += gpus * max(60.0, j.duration)
    return out, dict(weight)


def jobs(n: int, seed: int = 7):
    rng = random.Random(seed)
    total = sum(CAPS)
    mean_gpus = sum(s * p for s, p in zip(SIZES, MIX))
    mean_run = 1800 * math.exp(0.5)  # log-normal(ln 1800, 1): mean = median * e^(sigma^2/2)
    rate = 0.85 * total / (mean_gpus * mean_run)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        size = rng.choices(SIZES, MIX)[0]
        out.append({"id": i, "team": rng.choice(TEAMS), "gpus": size, "submit": t,
                    "run": max(60.0, rng.lognormvariate(math.log(1800), 1.0))})
    return out


class Cluster:
    def __init__(self, idx, cap, shares):
        self.idx, self.cap, self.shares = idx, cap, shares
        self.queue: list[dict] = []  # copies waiting (dicts shared with the job record)
        self.running: dict[int, dict] = {}  # job id -> {"job", "end", "borrowed"}

    def used(self, team=None):
        return sum(r["job"]["gpus"] for r in self.running.values() if team is None or r["job"]["team"] == team)

    def free(self):
        return self.cap - self.used()

    def view(self, name):
        pend = sum(j["gpus"] for j in self.queue)
        queues = {t: {"H100": QueueShare(g, q, None, self.used(t))} for (c, t), (g, q) in self.shares.items()
                  if c == self.idx}
        return ClusterView(name, flavors={"H100": FlavorState(self.cap, self.free(), 8, {1: 8, 2: self.cap})},
                           queues=queues, pending_gpus=pend)


def simulate(policy: str, js: list[dict], caps=CAPS, shares=None):
    shares = shares or world()
    cl = [Cluster(i, cap, shares) for i, cap in enumerate(caps)]
    names = [f"c{i}" for i in range(len(caps))]
    pending = sorted(js, key=lambda j: j["submit"])
    for j in pending:
        j.update(start=None, end=None, borrowed_starts=0, reclaims=0, copies=0, wasted=0, placed=None)
    k, now, turn, done = 0, 0.0, 0, 0
    horizon = max(j["submit"] for j in js) + 30 * 86400  # jobs still waiting then count as waiting until then
    while done < len(js) and now < horizon:
        now += TICK
        # finish
        for c in cl:
            for jid in [jid for jid, r in c.running.items() if r["end"] <= now]:
                r = c.running.pop(jid)
                r["job"]["end"] = r["end"]
                done += 1
        # arrivals
        while k < len(pending) and pending[k]["submit"] <= now:
            j = pending[k]
            k += 1
            req = JobRequest(j["id"], j["team"], j["gpus"], min(j["gpus"], 8))
            views = [c.view(n) for c, n in zip(cl, names)]
            if policy == "first-to-admit":
                targets = [names.index(n) for n in first_to_admit(req, views)]
            elif policy == "round-robin":
                targets = [names.index(round_robin(req, views, turn))]
                turn += 1
            elif policy == "least-loaded":
                targets = [names.index(least_loaded(req, views))]
            else:
                targets = [names.index(choose(req, views).cluster)]
            j["copies"] = len(targets)
            for t in targets:
                cl[t].queue.append(j)
        # each cluster starts what fits (FIFO with backfill); reclaim for within-quota jobs
        for c in cl:
            for j in list(c.queue):
                if j["start"] is not None and j["placed"] is not c:  # started elsewhere: copy deleted
                    c.queue.remove(j)
                    continue
                g, q = c.shares[(c.idx, j["team"])]
                within = c.used(j["team"]) + j["gpus"] <= q
                if c.free() < j["gpus"] and within:
                    need = j["gpus"] - c.free()
                    victims = sorted((r for r in c.running.values() if r["borrowed"]), key=lambda r: -r["start"])
                    freed = []
                    for r in victims:
                        if need <= 0:
                            break
                        freed.append(r)
                        need -= r["job"]["gpus"]
                    if need <= 0:
                        for r in freed:
                            c.running.pop(r["job"]["id"])
                            r["job"]["reclaims"] += 1
                            c.queue.insert(0, r["job"])
                if c.free() >= j["gpus"]:
                    c.queue.remove(j)
                    if j["start"] is not None and j["placed"] is not c and j["start"] == now:
                        j["wasted"] += 1  # two clusters admitted it in the same tick: one start thrown away
                        continue
                    borrowed = not within
                    j["borrowed_starts"] += borrowed
                    if j["start"] is None:
                        j["start"] = now
                    j["placed"] = c
                    c.running[j["id"]] = {"job": j, "end": now + j["run"], "borrowed": borrowed, "start": now}
    by_size = defaultdict(list)
    for j in js:
        by_size[j["gpus"]].append((j["start"] if j["start"] is not None else now) - j["submit"])
    waits = [w for v in by_size.values() for w in v]

    def p99(v):
        v = sorted(v)
        return v[min(len(v) - 1, int(0.99 * len(v)))]
    return {"mean_wait_s": sum(waits) / len(waits), "p99_wait_s": p99(waits),
            "by_size": {s: {"mean": sum(v) / len(v), "p99": p99(v), "jobs": len(v)} for s, v in sorted(by_size.items())},
            "borrowed_starts": sum(j["borrowed_starts"] for j in js), "reclaims": sum(j["reclaims"] for j in js),
            "copies_per_job": sum(j["copies"] for j in js) / len(js),
            "remote_copies_per_job": sum(j["copies"] - 1 for j in js) / len(js),
            "wasted_starts": sum(j["wasted"] for j in js)}


def decision_rate(n_clusters: int, decisions: int = 2000) -> float:
    rng = random.Random(1)
    views = []
    for i in range(n_clusters):
        cap = rng.choice((256, 512, 1024))
        views.append(ClusterView(f"c{i}", flavors={"H100": FlavorState(cap, rng.randrange(cap), 8, {1: 8, 2: 256, 3: cap}),
                                                   "A100": FlavorState(cap // 2, rng.randrange(cap // 2), 8, {1: 8, 2: cap // 2})},
                                 queues={t: {"H100": QueueShare(32, 64, None, rng.randrange(64)),
                                             "A100": QueueShare(0, 32, None, 0)} for t in TEAMS},
                                 pending_gpus=rng.randrange(512), labels={"region": rng.choice("ab")},
                                 cost_per_gpu_hour=rng.random() * 3))
    reqs = [JobRequest(i, rng.choice(TEAMS), s, min(s, 8), highest_tier=2) for i, s in
            enumerate(rng.choices(SIZES, MIX, k=decisions))]
    t0 = time.perf_counter()
    for r in reqs:
        choose(r, views)
    return decisions / (time.perf_counter() - t0)


def summary_bytes() -> int:
    """JSON bytes of summarize() for a Philly-sized member (138 nodes, 624 GPUs, 15 team queues)."""
    from scheduler.core.snapshot import DomainInfo, NodeInfo, QueueInfo, QuotaInfo, Snapshot

    doms = [DomainInfo("spine", 3)] + [DomainInfo(f"leaf{i}", 2, "spine") for i in range(6)]
    nodes = [NodeInfo(f"n{i}", "P100" if i < 80 else "P40", 2 if i < 80 else 8, f"leaf{i % 6}") for i in range(138)]
    queues = [QueueInfo(f"team{i}", quotas={"P100": QuotaInfo(4, 8, 16), "P40": QuotaInfo(8, 24, 48)}) for i in range(15)]
    body = summarize(Snapshot(nodes=tuple(nodes), domains=tuple(doms), queues=tuple(queues)))
    body["jobs"] = [{"id": 100000 + i, "external_id": f"fed:{i}:g0", "state": "running"} for i in range(100)]
    return len(json.dumps(body, separators=(",", ":")))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--philly", action="store_true", help="the Philly trace on its 624 GPUs split 312/208/104")
    ap.add_argument("--start-day", type=float, default=21.0)
    ap.add_argument("--days", type=float, default=3.0)
    args = ap.parse_args(argv)
    if args.philly:
        caps = (312, 208, 104)
        base, weights = philly_jobs(args.start_day, args.days, max(caps))
        teams = sorted(weights)
        shares = world(caps, teams, weights)
        make = lambda: [dict(j) for j in base]  # noqa: E731
        n = len(base)
    else:
        caps, shares = CAPS, world()
        n = args.jobs or (600 if args.quick else 3000)
        make = lambda: jobs(n)  # noqa: E731
    out = {"jobs": n, "clusters_gpus": caps, "policies": {}}
    for policy in ("dispatcher", "first-to-admit", "round-robin", "least-loaded"):
        out["policies"][policy] = simulate(policy, make(), caps, shares)
    out["decisions_per_s"] = {k: round(decision_rate(k)) for k in (10, 50)}
    size = summary_bytes()
    out["summary_bytes"] = size
    out["sync_bytes_per_cluster_per_min_at_30s"] = size * 2
    print(f"{n} jobs on clusters of {caps} GPUs")
    print(f"{'policy':16} {'mean wait':>10} {'p99 wait':>10} {'borrowed':>9} {'reclaims':>9} {'copies/job':>11} {'wasted':>7}")
    for p, r in out["policies"].items():
        print(f"{p:16} {r['mean_wait_s']:10.0f} {r['p99_wait_s']:10.0f} {r['borrowed_starts']:9d} {r['reclaims']:9d} "
              f"{r['copies_per_job']:11.2f} {r['wasted_starts']:7d}")
        print("    mean / p99 wait by size (s): " + ", ".join(
            f"{s}: {v['mean']:.0f}/{v['p99']:.0f}" for s, v in r["by_size"].items()))
    print(f"decisions/s: {out['decisions_per_s']}; summary {size} B -> {size * 2} B per cluster per minute (30 s sync)")
    if not args.philly and args.jobs is None:
        import _common as C  # benchmarks/ is on sys.path when run as a script or from benchmarks/run.py

        C.save("federation_quick" if args.quick else "federation", out)
    return out


if __name__ == "__main__":
    main()
