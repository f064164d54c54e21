"""Per-team fairness of a replay: Jain's index of usage / fair share, integrated over simulated time.

Jain's fairness index (R. Jain, D.-M. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
Discrimination for Resource Allocation in Shared Computer Systems", DEC-TR-301, 1984):

    J(x_1..x_n) = (sum x_i)^2 / (n * sum x_i^2),   1/n <= J <= 1 (1 = every x_i equal)

Here x_i = usage_i / fair_share_i of team i, in GPUs, where fair_share_i is the engine's water-filled
fair share (scheduler.core.plugins.fairshare.fair_shares: quota first, the rest by weight, capped at
demand = GPUs in use + GPUs requested by pending jobs), summed over the flavors and leaf queues of the
team; on a cluster of several GPU models a queue's sum over the flavors is capped at its demand in GPUs, each job
once (a job that may take any model counts on each flavor's water-fill: FairnessMeter.observe's queue_demand). Teams "with demand" are those whose fair share is > 0 at that moment; a team using GPUs with a
fair share of 0 (a quota-0 queue borrowing while others are entitled to everything) has no finite x_i
and is left out of J (its usage still shows in the per-team table).

Choice (stated, as the issue asks): J is computed once per scheduling cycle, from the fair shares of the
cycle's snapshot and the usage right after the cycle's decisions were applied, and averaged over time
weighted by the time to the next cycle (the state the cycle left holds until then, up to completions
in between). Two averages are reported: over all time when at least one team has demand, and over
contended time only (demand > schedulable GPUs), since without contention every team's fair share is
its demand and J is ~1 whatever the policy. Per team: the time-weighted mean of x_i over the time the
team had demand, and its GPU-hours used and fair-share GPU-hours.

Pure: no Django, no I/O. Units: GPUs, seconds of simulated time, GPU-hours in the summary.
"""
from __future__ import annotations

from collections import defaultdict

from scheduler.core.plugins.fairshare import fair_shares, pending_demand, schedulable_gpus
from scheduler.core.plugins.quota import QueueTree
from scheduler.core.snapshot import Snapshot

EPS = 1e-9


def jain_index(values) -> float | None:
    """Jain's index of non-negative values; None when there are none or all are 0 (undefined)."""
    xs = list(values)
    total = sum(xs)
    squares = sum(x * x for x in xs)
    if not xs or squares <= 0:
        return None
    return total * total / (len(xs) * squares)


def snapshot_fair_share(snapshot: Snapshot, leaving=frozenset()) -> dict[str, dict[str, float]]:
    """queue -> flavor -> water-filled fair share (GPUs) of a snapshot, computed as run_cycle does with
    fair_share on; for policies whose engine does not compute it (plain FIFO), and for the state a cycle leaves
    when it rejected jobs: `leaving` (job ids) are left out of the demand (a rejected job has none after it)."""
    pending = [j for j in snapshot.jobs if j.state == "pending" and j.id not in leaving]
    flavors = {n.flavor for n in snapshot.nodes}
    return fair_shares(QueueTree(snapshot), schedulable_gpus(snapshot.nodes), pending_demand(pending, flavors))


class FairnessMeter:
    """Integrates per-team usage / fair share and Jain's index over time (module docstring).

    teams: leaf queue -> team name. Call observe() after every cycle, then close() at the end."""

    def __init__(self, teams: dict[str, str]):
        self.teams = dict(teams)
        self._last: tuple | None = None  # (time, jain, contended, {team: (usage, fair)})
        self.time_with_demand = 0.0
        self.jain_integral = 0.0
        self.time_contended = 0.0
        self.jain_contended_integral = 0.0
        self.ratio_integral: dict[str, float] = defaultdict(float)
        self.demand_time: dict[str, float] = defaultdict(float)
        self.used_gpu_seconds: dict[str, float] = defaultdict(float)
        self.fair_gpu_seconds: dict[str, float] = defaultdict(float)
        self.observations = 0

    def observe(self, now: float, fair: dict[str, dict[str, float]], usage: dict[str, float],
                demand: float, capacity: float, queue_demand: dict[str, float] | None = None) -> float | None:
        """Record the state from `now` on. fair: queue -> flavor -> GPUs; usage: queue -> GPUs in use;
        demand: GPUs in use + requested by pending jobs; capacity: schedulable GPUs; queue_demand: queue -> its
        demand in GPUs, each job once (fairshare.queue_demand), the cap of the queue's fair share summed over the
        flavors (None: no cap, one flavor: the sum is that flavor's share, already capped at demand). Without it a
        job that may take any of 7 flavors was 7 times its GPUs of fair share (new-user trial 15, F1: one 1-GPU job
        alone on openb read usage/fair 0.14). Returns J now."""
        self._integrate(now)
        per_team: dict[str, list[float]] = {}
        for queue, team in self.teams.items():
            f = sum(fair.get(queue, {}).values())
            if queue_demand is not None:
                f = min(f, queue_demand.get(queue, 0.0))
            u = usage.get(queue, 0.0)
            if f <= EPS and u <= 0:
                continue
            row = per_team.setdefault(team, [0.0, 0.0])
            row[0] += u
            row[1] += f
        ratios = [u / f for u, f in per_team.values() if f > EPS]
        jain = jain_index(ratios)
        self._last = (now, jain, demand > capacity + EPS, per_team)
        self.observations += 1
        return jain

    def close(self, end: float) -> None:
        self._integrate(end)
        self._last = None

    def _integrate(self, to: float) -> None:
        if self._last is None:
            return
        since, jain, contended, per_team = self._last
        dt = to - since
        if dt <= 0:
            return
        if jain is not None:
            self.time_with_demand += dt
            self.jain_integral += jain * dt
            if contended:
                self.time_contended += dt
                self.jain_contended_integral += jain * dt
        for team, (u, f) in per_team.items():
            self.used_gpu_seconds[team] += u * dt
            self.fair_gpu_seconds[team] += f * dt
            if f > EPS:
                self.demand_time[team] += dt
                self.ratio_integral[team] += (u / f) * dt
        self._last = (to, jain, contended, per_team)

    def summary(self) -> dict:
        """jain_mean (time with demand), jain_contended_mean (contended time), their spans in hours, and
        per team: mean usage / fair share while it had demand, hours with demand, GPU-hours used and
        fair-share GPU-hours (over the observed cycles)."""
        teams = {}
        for team in sorted(set(self.used_gpu_seconds) | set(self.fair_gpu_seconds)):
            t = self.demand_time.get(team, 0.0)
            teams[team] = {
                "mean_usage_over_fair_share": self.ratio_integral[team] / t if t > 0 else None,
                "hours_with_demand": t / 3600.0,
                "gpu_hours_used": self.used_gpu_seconds[team] / 3600.0,
                "fair_share_gpu_hours": self.fair_gpu_seconds[team] / 3600.0,
            }
        return {
            "jain_mean": self.jain_integral / self.time_with_demand if self.time_with_demand > 0 else None,
            "jain_contended_mean": (self.jain_contended_integral / self.time_contended
                                    if self.time_contended > 0 else None),
            "hours_with_demand": self.time_with_demand / 3600.0,
            "hours_contended": self.time_contended / 3600.0,
            "teams": teams,
        }


def leaf_teams(queues) -> dict[str, str]:
    """Leaf queue name -> team (the queue's team, or its own name) for QueueSpec/QueueInfo-like objects
    with .name, .parent and optionally .team; inner queues (parents of others) are left out."""
    parents = {q.parent for q in queues if q.parent is not None}
    return {q.name: (getattr(q, "team", None) or q.name) for q in queues if q.name not in parents}
