"""The reclaim action (across queues; Volcano's reclaim action, Kueue's reclaim within a cohort).

A job takes back GPUs that other queues borrowed above their entitlement (plugins.quota.QueueTree
.entitlement; docs/quotas.md), so that its own queue gets what it deserves:

- beneficiary side: for a victim queue V, only the levels of the job's chain below the lowest ancestor it
  shares with V are checked (a move between siblings never raises a shared ancestor past what it frees): at
  each of them usage + the GPUs claimed <= entitlement. GPUs already held for the queue's jobs count as
  its usage, so a second job cannot claim past the entitlement while the first one's victims drain;
- victim side (plugins.victims.ReclaimLedger): a unit may be taken while some level of V's chain below the
  shared ancestor is still above its entitlement (the unit that crosses the line may take it below: a
  queue is protected while it is within its entitlement, not by a gang that reaches past it), never below
  a level's guarantee. The levels both chains share are not checked on this side either: a move between
  siblings is their parent's own business, whose guarantee protects it from other queues (Kueue, KAI);
- GPUs that evictions still in their grace period (this cycle's, or an earlier cycle's that stands) free
  beyond their beneficiaries' holds count as already-taken victims of their queue: a search uses them
  first and evicts nobody else while they suffice (the job then holds GPUs being released, with no
  eviction of its own).

Victims are searched from the closest branch outward: first siblings (the deepest shared ancestor), then
cousins, and so on, each time with the claim bounded by the levels that move. It aims at min(the job's full
request, that bound), so an elastic job gets its whole entitlement back in one go. Called by the eviction
phase (actions/evict.py), which applies the result. Units: GPUs.
"""
from __future__ import annotations

from ..plugins.quota import QueueTree, count_text
from ..plugins.victims import ReclaimLedger, Unit
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo, TaskPlacement
from .victim_search import eviction_records, find_victims


def reclaim_may_help(queues: QueueTree, job: JobInfo, flavor: str) -> bool:
    """Cheap screen: the job's own queue is entitled to its minimum (the leaf is below the shared ancestor
    with any victim queue), and no limit of its own queue binds."""
    if job.queue not in queues.queues:
        return False
    if queues.claim_room((job.queue,), flavor) < job.gpus_min:
        return False
    room, limiter = queues.headroom(job.queue, flavor)
    return room >= job.gpus_min or limiter != job.queue


def anyone_borrowing(queues: QueueTree) -> bool:
    """Whether some queue uses more of some flavor than its entitlement (else there is nothing to reclaim)."""
    for q, per_flavor in queues.usage.items():
        if q not in queues.queues:
            continue
        for flavor, used in per_flavor.items():
            if used > queues.entitlement(q, flavor):
                return True
    return False


def reclaim(session: Session, job: JobInfo, flavor: str, units: list[Unit], flavor_of: dict[str, str],
            walks: dict | None = None, releasing: list[tuple[JobInfo, tuple[TaskPlacement, ...]]] = (),
            why: list[str] | None = None) -> tuple[Binding, list[Eviction]] | None:
    """(the placement the job starts on once the victims are gone, the Evictions; none when it gets GPUs
    being released) or None, on `flavor` GPUs; units: the evictable units of the running jobs, least work
    lost first (plugins.victims); flavor_of: node name -> flavor. walks: a memo for
    victim_search.find_victims kept by the caller while `units`, `releasing` and the queues' usage stay the
    same (emptied when any changes), or None: its keys are (the job's queue, flavor, depth, whether only
    victims below the binding limit count), which fix the candidates and the ledger's starting point, and
    ("others", the job's queue) for the units of the other queues.
    releasing: (victim, tasks) whose GPUs evictions in their grace period free and no hold wants: those of
    another queue count as already-taken victims of that queue (its depth: the circle they come from), so a
    search uses them before it evicts anyone else (victim_search.find_victims).
    why: a list the clause saying which rule of reclaim refused is appended to when the search fails for a rule
    (refusal_clause; a level of the job's own chain at its entitlement, or victim queues the ledger refused), or
    None (nothing worked out). The walks that never passed keep their ledger's refusals (key ("refused", walk)),
    so a job whose walk the memo answers gets the same clause as the first job that walked it."""
    queues = session.queues
    chain = queues.chain(job.queue)
    # the units of the other known queues: the same for every job of this queue while `units` holds (kept in `walks`
    # under ("others", queue), a key no walk has: the caller empties it when the units change)
    others = walks.get(("others", job.queue)) if walks is not None else None
    if others is None:
        others = [u for u in units if u.job.queue != job.queue and queues.known(u.job.queue)]
        if walks is not None:
            walks[("others", job.queue)] = others
    freed = [(v, ts) for v, ts in releasing if v.queue != job.queue and queues.known(v.queue)]
    if not others and not freed:
        return None
    limit_room, limiter = queues.headroom(job.queue, flavor)
    # depth = how many levels of the job's chain lie below the ancestor shared with the victim's queue
    depth_of: dict[str, int] = {}
    for q in [u.job.queue for u in others] + [v.queue for v, _ in freed]:
        if q not in depth_of:
            depth_of[q] = len(queues.below_common(job.queue, q))
    refused: dict = {}  # victim queue -> its ledger refusal (ReclaimLedger.refused), over the circles searched
    short = None  # the level of the job's chain with the least room when a wider circle's room is below its minimum
    for depth in sorted(set(depth_of.values())):
        room = queues.claim_room(chain[:depth], flavor)
        if room < job.gpus_min:
            if why is not None:
                short = min(chain[:depth], key=lambda q: queues.entitlement(q, flavor) - queues.usage[q][flavor])
            break  # a wider circle adds levels: the room only shrinks
        target = int(min(job.gpus_requested, room))
        candidates = [u for u in others if depth_of[u.job.queue] <= depth]
        limited = limit_room < target
        if limited:
            # a limit binds (e.g. the root's, when the cluster is full): only victims below the binding
            # level make room under it, and only their GPUs count
            if limiter == job.queue:
                return None
            candidates = [u for u in candidates if limiter in queues.chain(u.job.queue)]
        ledger = ReclaimLedger(queues, job.queue, flavor_of)
        walk = (job.queue, flavor, depth, limited)
        found = find_victims(session, job, flavor, target=target, units=candidates, ledger=ledger,
                             room=limit_room, walks=walks, walk=walk,
                             releasing=[(v, ts) for v, ts in freed if depth_of[v.queue] <= depth])
        if found is not None:
            placement, victims = found
            return placement, eviction_records(victims, "reclaim", job)
        if why is not None:  # a failed walk: its refusals (none read when the memo answered: those kept, the same)
            seen = ledger.refused
            if walks is not None:
                if seen:
                    walks[("refused", walk)] = seen
                else:
                    seen = walks.get(("refused", walk), seen)
            for q, r in seen.items():
                refused.setdefault(q, r)
    if why is not None:
        clause = refusal_clause(queues, flavor, short, refused)
        if clause is not None:
            why.append(clause)
    return None


def refusal_clause(queues: QueueTree, flavor: str, short: str | None, refused: dict) -> str | None:
    """The clause of a waiting job's reason that says which rule of reclaim refused it, or None: `short`, a level of
    its own chain with no room left below its entitlement for the job's minimum (its chain takes back only up to
    that: the wider circles were not searched), named first; else the victim queues' refusals (ReclaimLedger.refused,
    first refused first): several queues none of which borrows, or the first refused queue and its rule (its
    guarantee, or its entitlement), with how many more refused. Units: GPUs of `flavor`."""
    if short is not None:
        used = queues.usage[short][flavor]
        return (f"reclaim: queue {short} uses {count_text(used)} of its entitlement of "
                f"{count_text(queues.entitlement(short, flavor))} {flavor} GPUs")
    if not refused:
        return None
    rules = list(refused.values())
    if len(rules) > 1 and all(r[0] == "entitlement" for r in rules):
        return "reclaim: no queue borrows GPUs it could take"
    kind, queue, f, bound = rules[0]
    if kind == "guarantee":
        text = f"reclaim: queue {queue} would drop below its guarantee of {count_text(bound)} {f} GPUs"
    else:
        text = f"reclaim: queue {queue} is within its entitlement of {count_text(bound)} {f} GPUs"
    more = len(rules) - 1
    return text if not more else f"{text} ({more} more queue{'s' if more > 1 else ''} refused)"
