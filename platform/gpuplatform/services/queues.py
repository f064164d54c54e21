"""The queue tree and its quotas (models/queues.py). The rules are quota_rules.py's."""
from __future__ import annotations

import hashlib
import json
import math

from django.db import transaction

from scheduler.forecast.variants import WEIGHT_MAX, WEIGHT_MIN

from .. import quota_rules
from ..audit import record_event
from ..lifecycle import close_idle_queues, closed_ancestor
from ..models import Job, Queue, Quota, Team
from ..models.tenancy import canonical_key, name_meant
from ..names import name_error
from ..errors import ValidationError
from .base import lock_queue_tree, raise_if, request_cycle_on_commit, resolve_queue
from ..wording import one_of, quota_words

__all__ = ["create_queue", "update_queue", "set_quota", "delete_queue", "queue_grace_error", "queue_weight_error",
           "QUEUE_NAME_RULE", "queue_named", "queue_name_taken", "queue_clashes",
           "queue_version", "quota_version", "WEIGHT_MIN", "WEIGHT_MAX"]


# The one rule of what makes two queue names one queue: the team names' (models.tenancy.canonical_key: NFKC,
# case-folded, without '.', '_', '-' and white space), in the words every refusal uses (trial 21, F9: `Alpha` was
# created next to `alpha`, two queues that pages, metrics' labels and people read as one)
QUEUE_NAME_RULE = ("queue names that differ only in letter case or in the separators '.', '_' and '-' name the same "
                   "queue (gpu-a, gpu_a, GPU.A and gpua are one)")


def queue_named(name) -> str | None:
    """The name of the queue that `name` means by the queue name rule (QUEUE_NAME_RULE), or None: the queue of that
    exact name, else the first by id whose canonical key is `name`'s. Reads every queue's name (queues are few, and
    create_queue calls it under the queue tree's lock, which every queue write holds: no two creates interleave)."""
    return name_meant(Queue.objects.all(), name)


def queue_name_taken(holder: str) -> str:
    """The one wording of a queue name that clashes with queue `holder` (create_queue: the API, the admin, the
    cluster loader and gpuctl alike)."""
    return f"a queue named {holder!r} already exists: {QUEUE_NAME_RULE}"


def queue_clashes() -> list[str]:
    """One warning per set of queues that are one queue by the rule (QUEUE_NAME_RULE), stored before it: naming them
    and what to do (a queue cannot be renamed: move the jobs' submitters to one of them and close, then delete, the
    others). Shown on the admin's queues list; nothing is changed (a queue's name is in its jobs' history, its
    metrics' labels and its URLs)."""
    groups: dict[str, list[str]] = {}
    for name in Queue.objects.order_by("pk").values_list("name", flat=True):
        groups.setdefault(canonical_key(name), []).append(name)
    return [f"queues {', '.join(repr(n) for n in names)} are one queue by the rule ({QUEUE_NAME_RULE}), stored before "
            f"it: submit to one of them, then close and delete the others (a queue is not renamed)"
            for key, names in groups.items() if key and len(names) > 1]


def _version(values) -> str:
    return hashlib.sha256(json.dumps(list(values), default=str).encode()).hexdigest()[:16]


def queue_version(queue: Queue) -> str:
    """The version of what an admin edits on a queue (parent, weight, state, grace period): a form carries the
    one it was opened with, and update_queue(expected_version=...) refuses a save when it changed since
    (optimistic concurrency, as the REST API's If-Match; new-user trial 10, F1)."""
    return _version((queue.parent_id, queue.weight, queue.state, queue.preemption_grace_seconds))


def quota_version(row: Quota) -> str:
    """The version of a quota row's guarantee / quota / limit (see queue_version; set_quota(expected_version=))."""
    return _version((row.guarantee, row.quota, row.limit))


def _stale(what: str, now: str) -> ValidationError:
    return ValidationError({"version": f"this {what} was changed by someone else since you opened it (now {now}); "
                                       f"reload it and make your change again"})


@transaction.atomic
def create_queue(name: str, parent=None, team: Team | None = None, weight: float = 1, quotas=None, *,
                 state: str = "open", preemption_grace_seconds: int = 30, actor=None) -> Queue:
    """Create a queue under `parent` (Queue, name or id; None = a root) with quotas
    {flavor: (guarantee, quota, limit or None)} in GPUs.

    Raises ValidationError: name empty, breaking the name rule (names.py), or taken: another queue's name by the queue
    name rule (QUEUE_NAME_RULE: `Alpha` next to `alpha`; queue_name_taken names it) ("name"), unknown parent ("parent"),
    a team deleted since the caller read it ("team"), weight outside 0.001..1,000,000 ("weight"),
    bad state, a grace period outside 0..86400 s ("preemption_grace_seconds"),
    quota rules per flavor ("quotas[<flavor>].<guarantee|quota|limit>"): negative,
    guarantee > quota, quota > limit, limit above the parent's limit, children's quotas above the parent's.
    Holds the queue tree's lock (lock_queue_tree) from its checks to its commit.
    """
    lock_queue_tree()
    parent = resolve_queue(parent, "parent")
    errors: dict[str, str] = {}
    if name_error("queue", name):
        errors["name"] = name_error("queue", name)
    elif (holder := queue_named(name)) is not None:
        errors["name"] = queue_name_taken(holder)
    if queue_weight_error(weight):
        errors["weight"] = queue_weight_error(weight)
    if state not in Queue.State.values:
        errors["state"] = f"state must be one of {one_of(Queue.State.values)}"
    if queue_grace_error(preemption_grace_seconds):
        errors["preemption_grace_seconds"] = queue_grace_error(preemption_grace_seconds)
    if team is not None and not Team.objects.filter(pk=team.pk).exists():  # deleted (delete_team) since it was read
        errors["team"] = f"team {team.name} no longer exists"
    if parent is not None and Job.objects.filter(queue=parent).exists():
        errors["parent"] = (f"queue {parent.name} has jobs: a queue that runs jobs cannot get child queues "
                            f"(its jobs would sit on an inner queue)")
    for flavor, triple in (quotas or {}).items():
        prefix = f"quotas[{flavor}]."
        if not isinstance(triple, (tuple, list)) or len(triple) != 3:
            errors[f"quotas[{flavor}]"] = "expected (guarantee, quota, limit)"
            continue
        if flavor_case_error(flavor):
            errors[f"{prefix}flavor"] = flavor_case_error(flavor)
            continue
        errors.update(quota_rules.check_quota(Queue(parent=parent), flavor, *triple, prefix=prefix))  # not saved yet
    raise_if(errors)
    queue = Queue.objects.create(name=name, parent=parent, team=team, weight=weight, state=state,
                                 preemption_grace_seconds=preemption_grace_seconds)
    Quota.objects.bulk_create([Quota(queue=queue, flavor=f, guarantee=g, quota=q, limit=lim)
                               for f, (g, q, lim) in (quotas or {}).items()])
    record_event("queue_created", f"queue {name} created", actor=actor, queue=queue,
                 data={"parent": parent.name if parent else None, "team": team.name if team else None,
                       "weight": weight, "preemption_grace_seconds": preemption_grace_seconds,
                       "quotas": {f: list(t) for f, t in (quotas or {}).items()}})
    return queue


@transaction.atomic
def update_queue(queue: Queue, *, parent=..., weight: float | None = None, state: str | None = None,
                 preemption_grace_seconds: int | None = None, actor=None, expected_version: str | None = None) -> Queue:
    """Change a queue's parent (`...` = keep; None = make it a root), weight, state (open | closing |
    closed | draining) or preemption grace period (seconds a preempted job gets to checkpoint, 0..86400).
    Closing (state "closing", or "closed" asked while the queue or any queue below it still has pending or
    live jobs) takes no new jobs, in the queue or anywhere below it, and lets its subtree's jobs run to their
    end; the queue becomes closed when the last job of its subtree ends (lifecycle.close_idle_queues; at once
    when it has none). A queue with live jobs below it cannot move under a closed queue ("parent").
    Raises ValidationError: unknown parent, a parent change that makes a cycle or breaks a quota rule at the new
    place (quota_rules.check_parent: the queue's quotas and limits checked as a quota change there) ("parent"), weight outside 0.001..1,000,000,
    unknown state, a grace period outside 0..86400 ("preemption_grace_seconds"); `expected_version` (the
    queue_version the caller's form was opened with) no longer the queue's ("version": changed since).
    Holds the queue tree's lock (lock_queue_tree) from its checks to its commit, and reads `queue` again under
    it (a field the caller loaded before another change committed is not written back)."""
    lock_queue_tree()
    queue.refresh_from_db()
    if expected_version is not None:
        locked = Queue.objects.select_for_update().get(pk=queue.pk)  # the check and the write under one lock
        if queue_version(locked) != expected_version:
            raise _stale("queue", f"parent {locked.parent.name if locked.parent_id else 'none'}, weight "
                                   f"{locked.weight}, state {locked.state}, grace {locked.preemption_grace_seconds} s")
    errors: dict[str, str] = {}
    changes: dict = {}
    if parent is not ...:
        parent = resolve_queue(parent, "parent")
        if parent is not None and quota_rules.makes_cycle(queue.pk, parent.pk):
            errors["parent"] = f"making {parent.name} the parent of {queue.name} would create a cycle"
        elif parent is not None and Job.objects.filter(queue=parent).exists():
            errors["parent"] = f"queue {parent.name} has jobs: a queue that runs jobs cannot get child queues"
        else:
            errors.update(quota_rules.check_parent(queue, parent))
        if "parent" not in errors and parent is not None and parent.pk != queue.parent_id:
            above = (parent.name, parent.state) if parent.state == Queue.State.CLOSED else closed_ancestor(parent.pk)
            if above is not None and above[1] == Queue.State.CLOSED and Job.objects.filter(
                    queue_id__in=quota_rules.subtree_ids(queue.pk),
                    state__in=(Job.State.PENDING, *Job.LIVE_STATES)).exists():
                errors["parent"] = (f"queue {above[0]} is closed (no live job below it); {queue.name} has pending "
                                    f"or live jobs in its subtree and cannot move under it")
        changes["parent"] = parent.name if parent else None
    if weight is not None:
        if queue_weight_error(weight):
            errors["weight"] = queue_weight_error(weight)
        changes["weight"] = weight
    if state is not None:
        if state not in Queue.State.values:
            errors["state"] = f"state must be one of {one_of(Queue.State.values)}"
        elif state == Queue.State.CLOSED:
            state = Queue.State.CLOSING  # closed only once its last job has ended: close_idle_queues below
        changes["state"] = state
    if preemption_grace_seconds is not None:
        if queue_grace_error(preemption_grace_seconds):
            errors["preemption_grace_seconds"] = queue_grace_error(preemption_grace_seconds)
        changes["preemption_grace_seconds"] = preemption_grace_seconds
    raise_if(errors)
    if parent is not ...:
        queue.parent = parent
    if weight is not None:
        queue.weight = weight
    if state is not None:
        queue.state = state
    if preemption_grace_seconds is not None:
        queue.preemption_grace_seconds = preemption_grace_seconds
    queue.save()
    record_event("queue_updated", f"queue {queue.name} updated", actor=actor, queue=queue, data=changes)
    if state == Queue.State.CLOSING:
        close_idle_queues([queue.pk], actor=actor)
        queue.refresh_from_db(fields=["state"])
    return queue


flavor_case_error = quota_rules.flavor_case_error  # (the rule's home: quota_rules; kept for its callers)


@transaction.atomic
def set_quota(queue: Queue, flavor: str, guarantee: int, quota: int, limit: int | None, actor=None,
              changed: set | None = None, expected_version: str | None = None, create: bool = False) -> Quota:
    """Create or change `queue`'s quota for GPU `flavor` (GPUs). Raises ValidationError naming
    flavor (empty, or a GPU model no node has) or guarantee / quota / limit: negative, guarantee > quota,
    quota > limit, limit above the parent's, siblings' quotas summing above the parent's, quota below the
    children's sum, limit below a child's. `changed`: the names a partial update sent, so a rule between two
    values is reported on the one the request changed (quota_rules.check_triple). Values equal to the row's
    write nothing (no event, no cycle; updated_at and so the ETag stay). `expected_version`: the quota_version
    the caller's form was opened with; refused ("version") when the row changed since (or is gone). `create`: the
    row must not exist yet (the quota API's POST; "flavor": change it with PUT/PATCH). Holds the queue tree's
    lock (lock_queue_tree) from its checks to its commit, so two changes never both pass a rule on each other's
    old rows."""
    lock_queue_tree()
    queue.refresh_from_db()
    if create and Quota.objects.filter(queue=queue, flavor=flavor).exists():
        raise ValidationError({"flavor": f"queue {queue.name} already has a {flavor} quota; change it with PUT/PATCH "
                                         f"and If-Match"})
    if expected_version is not None:
        locked = Quota.objects.select_for_update().filter(queue=queue, flavor=flavor).first()
        if locked is None or quota_version(locked) != expected_version:
            raise _stale("quota", "no such quota" if locked is None else
                         quota_words(locked.guarantee, locked.quota, locked.limit))
    case = flavor_case_error(flavor, queue)
    if case:
        raise ValidationError({"flavor": case})
    raise_if(quota_rules.check_quota(queue, flavor, guarantee, quota, limit, changed))
    old = Quota.objects.filter(queue=queue, flavor=flavor).values_list("guarantee", "quota", "limit").first()
    if old == (guarantee, quota, limit):  # a no-op (PATCH {}): no write, so updated_at and the ETag stay
        return Quota.objects.get(queue=queue, flavor=flavor)
    row, _ = Quota.objects.update_or_create(queue=queue, flavor=flavor,
                                            defaults={"guarantee": guarantee, "quota": quota, "limit": limit})
    record_event("quota_changed", f"quota of {queue.name}/{flavor}: {quota_words(guarantee, quota, limit)}", actor=actor,
                 queue=queue, data={"flavor": flavor, "old": list(old) if old else None,
                                    "new": [guarantee, quota, limit]})
    request_cycle_on_commit()
    return row


def quota_use(queue: Queue, flavor: str) -> int | float:
    """GPUs (GPU-equivalents: a 0.25 share counts 0.25) of `flavor` that `queue` and the queues below it hold now
    (their live allocations on nodes of that flavor), as the engine charges a queue's usage up its chain
    (scheduler.core.plugins.quota) and the queues page counts `used`."""
    from django.db.models import Sum

    from ..gpu_request import from_milli
    from ..models import Allocation
    from ..queries import allocation_gpu_milli

    milli = (Allocation.objects.filter(released_at__isnull=True, job__queue_id__in=quota_rules.subtree_ids(queue.pk),
                                       gpu__node__flavor=flavor)
             .aggregate(n=Sum(allocation_gpu_milli()))["n"])
    return from_milli(milli or 0)


def quota_note(row: Quota) -> str | None:
    """The quota API's `quota_note` (session 27, an admin's trial): a quota or limit set below what the queue uses
    now is accepted (its running jobs keep their GPUs, as in Kueue and Volcano) and said, in the engine's terms
    (docs/quotas.md, "What a queue may do"): a limit evicts nothing, it stops the queue's (and its subtree's) new
    jobs and growth on that flavor until use + request fits (QueueTree.headroom); the GPUs above the quota are
    borrowed, which other queues' jobs within their own entitlement may take back (reclaim), never below the
    guarantee. None when the queue uses no more than its quota (and a MIG resource, counted in instances)."""
    if "/mig-" in row.flavor:
        return None
    used = quota_use(row.queue, row.flavor)
    if used <= row.quota:
        return None
    name, flavor = row.queue.name, row.flavor
    parts = [f"queue {name} (with the queues below it) uses {used:g} {flavor} GPUs"]
    if row.limit is not None and used > row.limit:
        parts[0] += (f", above its limit of {row.limit}: its running jobs keep them (a limit evicts nothing); no new "
                     f"job of it or of a queue below it starts on {flavor}, nor does an elastic job grow there, until "
                     f"their use plus the job's request is within the limit")
    parts.append(f"the {used - row.quota:g} above its quota of {row.quota} are borrowed (unless its parent leaves "
                 f"quota unassigned that it is entitled to: docs/quotas.md): a job of another queue within its own "
                 f"entitlement may take them back (reclaim), never below this queue's guarantee of {row.guarantee}")
    return "; ".join(parts)


@transaction.atomic
def delete_queue(queue: Queue, *, actor=None) -> None:
    """Delete an empty leaf queue and its quotas. Raises ValidationError naming the rule: the queue has
    child queues ("children"), or jobs ("jobs": live or pending ones must finish or be cancelled first;
    finished ones keep the queue for the record: close it instead), or it is gone ("queue": deleted by a concurrent
    request). Holds the queue tree's lock. The REST API's DELETE /api/v1/queues/<name>/ and the admin call it."""
    lock_queue_tree()
    if not Queue.objects.filter(pk=queue.pk).exists():
        raise ValidationError({"queue": f"queue {queue.name} no longer exists (deleted meanwhile)"})
    errors: dict[str, str] = {}
    children = list(Queue.objects.filter(parent=queue).values_list("name", flat=True)[:5])
    if children:
        errors["children"] = f"queue {queue.name} has child queues ({', '.join(children)}); delete or move them first"
    live = Job.objects.filter(queue=queue).exclude(state__in=Job.FINAL_STATES).count()
    done = Job.objects.filter(queue=queue, state__in=Job.FINAL_STATES).count()
    if live:
        errors["jobs"] = (f"queue {queue.name} has {live} pending or running job(s); cancel them or let them "
                          f"finish first (close the queue to stop new submissions)")
    elif done:
        errors["jobs"] = (f"queue {queue.name} has {done} finished job(s) whose history refers to it; "
                          f"close the queue instead of deleting it")
    raise_if(errors)
    name = queue.name
    record_event("queue_deleted", f"queue {name} deleted", actor=actor,
                 data={"queue": name, "parent": queue.parent.name if queue.parent_id else None})
    Quota.objects.filter(queue=queue).delete()
    queue.delete()
    request_cycle_on_commit()


def _positive_number(value) -> bool:
    """A weight: a real number > 0 and finite (NaN compares greater than every number in PostgreSQL, so
    a NaN weight would pass the table's `weight > 0` check and break the fair-share order)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


# A queue's weight (its share of idle capacity against its siblings'): one range for the queue API, the admin
# form, the cluster spec loader, the what-if's set_weight and the replay's what-if variants (new-user trial 10,
# F7: 1e-300 and 1e9 were stored while the what-if refused them, and 1e-300 is a zero weight in all but name).
# Kept in scheduler.forecast.variants, which may not import the platform.


def queue_weight_error(weight) -> str | None:
    """The rule a queue weight breaks: a finite number from WEIGHT_MIN to WEIGHT_MAX (None: none)."""
    if not _positive_number(weight) or not WEIGHT_MIN <= weight <= WEIGHT_MAX:
        return f"weight must be a number from {WEIGHT_MIN} to {WEIGHT_MAX:,}"
    return None


MAX_GRACE_SECONDS = 86400


def queue_grace_error(seconds) -> str | None:
    """The rule a preemption grace period breaks: a whole number of seconds from 0 to a day (None: none).
    create_queue / update_queue apply it; the admin's queue form shows it on its field."""
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_GRACE_SECONDS:
        return f"preemption_grace_seconds must be a whole number of seconds from 0 to {MAX_GRACE_SECONDS}"
    return None
