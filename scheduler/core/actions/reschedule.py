"""The rescheduling action: move migratable jobs so a job blocked by fragmentation alone can start
(defragmentation; Volcano's descheduler, KAI's consolidation), and the same planner as advice.

    hold_moving(session)                                     # before allocate, every cycle
    reschedule(session, failed_order, reasons) -> Rescheduling  # after the eviction phase, every N cycles

A pending job is *blocked by fragmentation alone* when its reason is no_domain or no_packing (its queue
had room, the cluster has enough free GPUs of its flavor: `state.domain_free(root, flavor) >= need`) and
no domain of its tiers holds it. For such a job, waiting at least `reschedule_min_wait` seconds, the
planner looks, tier by tier (lowest first), at the domains whose free GPUs plus the GPUs of movable jobs
inside them reach its minimum, fewest GPUs short first (a domain with enough free GPUs but no node
packing counts 0 short), and frees one greedily: first the movable jobs whose leaving frees the largest
block on one node, then those with the most GPUs inside the domain, until the job's gang fits there
(session.try_place within it); jobs the placement turns out not to need are given back (fill-back). Every
chosen job must then find a new place of the same size and flavor outside the GPUs being freed (its own
topology rule applies); the beneficiary's placement counts as taken. A plan is kept only when
  - every moved job has its new place (never a move that does not let the waiting job start),
  - the largest runnable job (metrics.cluster_metrics' largest_runnable) at the domain's tier and every
    tier above is not lower once the moved jobs sit at their new places and their old GPUs are free, than
    without the moves; both in the state as this cycle's allocate and eviction phases (and earlier plans)
    left it: its bindings and holds taken, not the snapshot's,
and among the plans the one with the fewest moves, then fewest GPUs moved, wins (lowest tier first).

Applying a plan: the moved jobs are evicted gracefully (Eviction rule "reschedule", `grace` = their
`checkpoint_grace`), the beneficiary's GPUs are held for it (a Nomination) and each moved job's new
place is held for it at once (a Nomination on a job that is still running / preempting); when its grace
ends it is requeued with that hold (`JobInfo.reserved`) and restarts there from its checkpoint.
`hold_moving` re-holds those places every cycle until the job is pending again.

Bounds: a job is *movable* when it is migratable (and preemptible), running (not already being evicted), has run
`min_run_before_move` seconds, and was not moved within `reschedule_window` seconds
(Snapshot.recent_moves); at most `reschedule_moves_per_hour` moves in any hour (K), at most
`reschedule_max_victims` jobs for one beneficiary. Since a move needs a beneficiary that starts on the
freed GPUs and no job moves twice in a window, rounds cannot loop.

Advice (`reschedule_advice`): the same planner over running jobs that are *not* migratable (not
applied, no bounds but the victim count): "moving jobs 812, 907 would free rack r12 for job 1033 (64
GPUs, waiting 3 h)", for an operator to act on. Units: GPUs, seconds of the cluster clock.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from ..metrics import cluster_metrics
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo, Move, PendingReason, RoleInfo
from ..trial import Trial, release_binding

MOVE_CODES = {"no_domain", "no_packing"}  # pending reasons that fragmentation alone can cause
MAX_DOMAINS = 32  # domains tried per tier and beneficiary (bounds the planner's cost)
MAX_CANDIDATES = 24  # movable jobs looked at per domain
MAX_BENEFICIARIES = 8  # blocked jobs planned for per round
HOUR = 3600.0


@dataclass(slots=True)
class Plan:
    """Moves that let `job` start: its placement inside `domain`, and per moved job its new placement."""

    job: JobInfo
    flavor: str
    placement: Binding
    domain: int
    moves: list[tuple[JobInfo, Binding]]

    @property
    def moved_gpus(self) -> int:
        return sum(_gpus(v.placement) for v, _ in self.moves)


@dataclass(slots=True)
class Rescheduling:
    """What a round decided: evictions (rule "reschedule"), the moves, one audit decision per beneficiary,
    and advice (dicts, see `advice_record`)."""

    evictions: list[Eviction] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    decisions: list[dict] = field(default_factory=list)
    advice: list[dict] = field(default_factory=list)


def _gpus(tasks) -> int:
    return sum(len(t.gpus) for t in tasks)


def hold_moving(session: Session) -> None:
    """Hold again the new places of jobs being moved (not pending, with `reserved`): they stay out of
    everyone's pool until the job is requeued and starts on them (then allocate's holders serve it)."""
    for job in session.snapshot.jobs:
        if job.state != "pending" and job.reserved:
            session.nominate(job, job.reserved)


def due(session: Session) -> bool:
    """Whether this cycle runs a rescheduling round (every `reschedule_every` cycles)."""
    config = session.config
    every = max(1, config.reschedule_every)
    return (config.reschedule or config.reschedule_advice) and session.snapshot.cycle % every == 0


def reschedule(session: Session, failed_order: list[JobInfo], reasons: dict,
               evicted: set | None = None) -> Rescheduling:
    """One round (module docstring). failed_order: the jobs allocate could not start, in its order;
    reasons: job id -> PendingReason, updated in place for each beneficiary ("nominated"); evicted: ids
    of jobs evicted earlier this cycle (never moved). Applies holds to the session."""
    out = Rescheduling()
    config, snapshot, now = session.config, session.snapshot, session.now
    evicted = set(evicted or ())
    blocked = [j for j in failed_order
               if reasons.get(j.id) is not None and reasons[j.id].code in MOVE_CODES and not j.reserved]
    blocked = [j for j in (*draining(session, reasons), *blocked)
               if now - j.submit_time >= config.reschedule_min_wait][:MAX_BENEFICIARIES]
    if not blocked:
        return out
    running = [j for j in snapshot.jobs if j.state == "running" and j.placement and j.id not in evicted
               and not j.reserved]
    if config.reschedule:
        recent = [m for m in snapshot.recent_moves if now - m.time < config.reschedule_window]
        budget = config.reschedule_moves_per_hour - sum(1 for m in recent if now - m.time < HOUR)
        moved_lately = {m.job_id for m in recent}
        movable = [j for j in running if j.migratable and j.preemptible and j.id not in moved_lately
                   and now - (j.start_time if j.start_time is not None else now) >= j.min_run_before_move]
        for job in blocked:
            if budget <= 0 or not movable:
                break
            holds = session.holds
            held = holds.holding(job.id)
            if held:  # a drain reservation: its GPUs count as free for it while planning
                holds.release(job.id)
            plan = best_plan(session, job, movable, min(config.reschedule_max_victims, budget))
            if plan is None:
                if held:
                    holds.retake(job.id)
                continue
            holds.drop(job.id)
            _apply(session, plan, out, reasons)
            budget -= len(plan.moves)
            gone = {v.id for v, _ in plan.moves}
            movable = [j for j in movable if j.id not in gone]
            evicted |= gone
    if config.reschedule_advice:
        fixed = [j for j in running if not j.migratable and j.id not in evicted]
        for job in blocked:
            if job.id in {d["beneficiary"] for d in out.decisions}:
                continue
            holds = session.holds
            held = holds.holding(job.id)
            if held:
                holds.release(job.id)
            plan = best_plan(session, job, fixed, config.reschedule_max_victims)
            if held:
                holds.retake(job.id)
            if plan is not None:
                out.advice.append(advice_record(session, plan))
    return out


def draining(session: Session, reasons: dict) -> list[JobInfo]:
    """Pending jobs holding GPUs that no evicted job is releasing (drain reservations of starving jobs,
    backfill.py): rescheduling may start them sooner than the drain. Submit order."""
    releasing = {(t.node, g) for j in session.snapshot.jobs if j.state == "preempting" for t in j.placement
                 for g in t.gpus}
    out = []
    for job in session.snapshot.jobs:
        if job.state != "pending" or not job.reserved or job.id not in reasons:
            continue
        if reasons[job.id].code != "nominated" and reasons[job.id].code not in MOVE_CODES:
            continue
        if not any((t.node, g) in releasing for t in job.reserved for g in t.gpus):
            out.append(job)
    return sorted(out, key=lambda j: (j.submit_time, str(j.id)))


def best_plan(session: Session, job: JobInfo, movable: list[JobInfo], max_victims: int) -> Plan | None:
    """The cheapest plan (fewest moves, then fewest GPUs moved; lowest tier first) that lets `job` start
    by moving at most `max_victims` of `movable` (running jobs), or None. The state is left unchanged."""
    if max_victims <= 0:
        return None
    state, tree = session.state, session.tree
    need = job.gpus_min
    for flavor in session.flavors(job):
        if state.domain_free(tree.root, flavor) < need:
            continue  # not fragmentation alone: the cluster lacks free GPUs of this flavor
        inside: dict[int, dict] = defaultdict(lambda: defaultdict(int))  # domain -> movable job id -> GPUs in it
        jobs = {}
        for v in movable:
            for t in v.placement:
                k = state.node_index.get(t.node)
                if k is None or state.nodes[k].flavor != flavor or not t.gpus:
                    continue
                jobs[v.id] = v
                for d in tree.node_chain[k]:
                    inside[d][v.id] += len(t.gpus)
        if not jobs:
            continue
        before = cluster_metrics(state)["largest_runnable"]
        for tier in session.tier_levels(job):
            domains = []
            for d in tree.by_tier.get(tier, ()):
                free = state.domain_free(d, flavor)  # at or above need: enough GPUs, but no node packing
                if free + sum(inside[d].values()) >= need:
                    domains.append((max(0, need - free), tree.names[d], d))
            best = None
            for _, _, d in sorted(domains)[:MAX_DOMAINS]:
                plan = _plan_in(session, job, flavor, d, inside[d], jobs, max_victims, before)
                if plan is not None and (best is None or (len(plan.moves), plan.moved_gpus)
                                         < (len(best.moves), best.moved_gpus)):
                    best = plan
                    if len(best.moves) == 1:
                        break
            if best is not None:
                return best
    return None


def _plan_in(session: Session, job: JobInfo, flavor: str, d: int, in_d: dict, jobs: dict, max_victims: int,
             before: dict) -> Plan | None:
    """Free domain d for `job` by moving jobs with GPUs in it (most GPUs inside first); None when no set of
    at most `max_victims` of them works, or the plan would lower the largest runnable job (`before`:
    largest_runnable now). The state is left unchanged."""
    state = session.state
    need = job.gpus_min
    # the jobs whose leaving frees the largest block on one node first (whole nodes for multi-GPU tasks),
    # then those with the most GPUs inside the domain
    def block(j) -> int:
        best = 0
        for t in jobs[j].placement:
            k = state.node_index.get(t.node)
            if k is not None and d in session.tree.node_chain[k]:
                best = max(best, len(state.free[k]) + sum(len(u.gpus) for u in jobs[j].placement if u.node == t.node))
        return best

    order = sorted(in_d, key=lambda j: (-block(j), -in_d[j], _gpus(jobs[j].placement), str(j)))[:MAX_CANDIDATES]
    trial = Trial(state)
    chosen: list[JobInfo] = []
    placed = None
    for vid in order:
        victim = jobs[vid]
        trial.free_tasks(victim, victim.placement)
        chosen.append(victim)
        if state.domain_free(d, flavor) >= need:
            attempt = session.try_place(job, flavor, target=need, within=d)
            if isinstance(attempt, Binding):
                placed = attempt
                break
        if len(chosen) >= max_victims:
            break
    if placed is None:
        trial.undo()
        return None
    # drop victims the placement does not need (fill-back), last chosen first
    for victim in reversed(list(chosen)):
        if len(chosen) == 1:
            break
        release_binding(state, job, placed)
        trial.unfree_tasks(victim, victim.placement)
        attempt = session.try_place(job, flavor, target=need, within=d)
        if isinstance(attempt, Binding):
            placed = attempt
            chosen.remove(victim)
            continue
        trial.free_tasks(victim, victim.placement)
        placed = session.try_place(job, flavor, target=need, within=d)
        assert isinstance(placed, Binding), "fill-back lost a placement it had"
    trial.place(job, placed)
    moves = _new_places(session, chosen, trial)
    trial.undo()
    if moves is None or _lowers_largest(session, moves, session.tree.tiers[d], before):
        return None
    return Plan(job, flavor, placed, d, moves)


def _new_places(session: Session, chosen: list[JobInfo], trial: Trial) -> list[tuple[JobInfo, Binding]] | None:
    """A new placement of the same size and flavor for every chosen job, none on GPUs being freed (the
    victims' old GPUs still free are blocked); applied to the trial. None when one has no place."""
    state = session.state
    for victim in chosen:
        for t in victim.placement:
            k = state.node_index.get(t.node)
            if k is None:
                continue
            free = set(state.free[k])
            mine = tuple(g for g in t.gpus if g in free)
            if mine:
                state.take(k, mine, 0, 0)
                trial.ops.append(("take", k, mine, 0, 0))
    moves = []
    for victim in chosen:
        mover = as_pending(victim)
        size = _gpus(victim.placement)
        flavor = state.nodes[state.node_index[victim.placement[0].node]].flavor
        new = session.try_place(mover, flavor, target=size)
        if not isinstance(new, Binding):
            return None
        trial.place(mover, new)
        if _gpus(new.tasks) != size:
            return None
        moves.append((victim, new))
    return moves


def _lowers_largest(session: Session, moves: list[tuple[JobInfo, Binding]], tier: int, before: dict) -> bool:
    """Whether, once the moved jobs sit at their new places and their old GPUs are free (the beneficiary
    not yet started), the largest runnable job at `tier` or above is lower than `before`
    (metrics.cluster_metrics' largest_runnable of the state before the plan). The state is unchanged."""
    trial = Trial(session.state)
    for victim, new in moves:
        trial.free_tasks(victim, victim.placement)
    for victim, new in moves:
        trial.unfree_tasks(as_pending(victim), new.tasks)
    after = cluster_metrics(session.state)["largest_runnable"]
    trial.undo()
    return any(after.get(t, 0) < v for t, v in before.items() if t >= tier)


def as_pending(job: JobInfo) -> JobInfo:
    """A running job as the pending job that would restart it: its placed tasks per role, no placement."""
    counts: dict[str, int] = defaultdict(int)
    for t in job.placement:
        counts[t.role] += 1
    roles = tuple(RoleInfo(r.name, counts[r.name], r.gpus_per_task, min(r.min_available, counts[r.name]),
                           r.cpu_milli, r.memory_mib, r.flavors) for r in job.roles if counts.get(r.name))
    return replace(job, roles=roles, state="pending", placement=(), reserved=(), start_time=None)


def _apply(session: Session, plan: Plan, out: Rescheduling, reasons: dict) -> None:
    tree, now, job = session.tree, session.now, plan.job
    session.nominate(job, plan.placement.tasks)
    domain = tree.names[plan.domain]
    victims = []
    for victim, new in plan.moves:
        session.nominate(victim, new.tasks)
        gpus = _gpus(victim.placement)
        out.evictions.append(Eviction(
            job_id=victim.id, tasks=(), gpus=gpus, rule="reschedule", beneficiary=job.id, grace=victim.checkpoint_grace,
            message=f"reschedule: {victim.name or victim.id} checkpoints and moves to {new.domain} so "
                    f"{job.name or job.id} ({job.gpus_min} GPUs) can start in {domain}"))
        out.moves.append(Move(job_id=victim.id, time=now, beneficiary=job.id, tasks=new.tasks, gpus=gpus))
        victims.append({"job": victim.id, "tasks": [], "gpus": gpus, "to": new.domain})
    reasons[job.id] = PendingReason(
        "nominated", f"reschedule: {len(plan.moves)} job(s) checkpoint and move to free {domain}; it starts there next")
    out.decisions.append({"rule": "reschedule", "beneficiary": job.id, "queue": job.queue, "domain": domain,
                          "tier": tree.tiers[plan.domain], "gpus": job.gpus_min, "victims": victims,
                          "usage_before": {}, "usage_after": {}})


def advice_record(session: Session, plan: Plan) -> dict:
    """{beneficiary, name, gpus, waiting_seconds, domain, tier, moves: [{job, name, gpus, to}], message}."""
    job, tree = plan.job, session.tree
    waited = max(0.0, session.now - job.submit_time)
    domain = tree.names[plan.domain]
    names = ", ".join(str(v.name or v.id) for v, _ in plan.moves)
    return {
        "beneficiary": job.id, "name": job.name or str(job.id), "gpus": job.gpus_min, "waiting_seconds": waited,
        "domain": domain, "tier": tree.tiers[plan.domain],
        "moves": [{"job": v.id, "name": v.name or str(v.id), "gpus": _gpus(v.placement), "to": new.domain}
                  for v, new in plan.moves],
        "message": f"moving job{'s' if len(plan.moves) > 1 else ''} {names} would free {domain} for job "
                   f"{job.name or job.id} ({job.gpus_min} GPUs, waiting {_duration(waited)})",
    }


def _duration(seconds: float) -> str:
    if seconds >= 2 * HOUR:
        return f"{seconds / HOUR:.0f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
