"""Job lifecycle writes shared by the scheduling cycle, failure detection and the services: graceful
eviction, requeue of a whole gang, release of surplus tasks, a task's "running" report.

Same style as the services: plain functions, each a compare-and-set on the row's state so a stale call
changes nothing (and returns False / 0), and an `Event` per transition (audit.record_event). Call them
inside the caller's transaction (they do not open one of their own, except `report_task_running`).
Units: seconds, GPUs.

Lock order: a write that touches a job's dependent rows (its Attempt, tasks, allocations) locks the job's
row FIRST (`lock_jobs`, in id order), as the agents' reports and the services do (execution/reports.py,
services.cancel_job). A cycle that closed a job's attempt before taking the job row deadlocked with a
report holding the row and inserting the same attempt (tests/integration/test_agents.py caught it).

Requeue semantics (DESIGN section 5 and the fault-recovery capability): the gang goes back to pending
whole, every live allocation is released at once (the same `released_at`), every task back to pending
with no node, `submitted_at` untouched (the job keeps its place in the order), `attempts` + 1. A requeue
after a failure (node lost, GPU failed, gang did not start in time, a task failed) adds a backoff: `not_before` =
now + min(REQUEUE_BACKOFF_SECONDS * 2**(n-1), REQUEUE_BACKOFF_CAP_SECONDS), where n counts only the attempts that
ended in the job's own failure (`own_failures`: restarts whose diagnosis is not a node or platform fault, this one
included). A platform fault (node or GPU lost, node agent exited, gang start timeout, a task failure diagnosed as
its node's: `engine.NODE_FAULT_CATEGORIES`) gets the base backoff, n = 1, however many attempts came before; the
scheduler's own evictions (preempt, reclaim, drain, moves) never count (trial 23: a job reclaimed three times then
hit by an agent exit waited 8 minutes on an idle cluster). A requeue at the end of a
preemption grace period (preempt, reclaim, drain) has none: the job did nothing wrong. A fault's requeue of a
gang with processes still on healthy node agents waits for them (execution.stops.stop_for_fault: the gang is
preempting meanwhile, trial 20, F10); its backoff then counts from the fault (`backoff_from`).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from operator import itemgetter

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from . import clock
from .audit import record_event
from .diagnosis.attempts import close_attempt, mark_recovered
from .diagnosis.engine import NODE_FAULT_CATEGORIES
from .models import Allocation, Attempt, Job, Task
from .scheduling.locks import lock_queue_tree
from .trees import Tree
from .wording import count
from scheduler.core.snapshot import utc_iso

# What a node reported about a task's process in the attempt that ended (cleared when the gang is requeued).
TASK_RUN_RESET = {"pid": None, "started_at": None, "ended_at": None, "exit_code": None, "exit_signal": None,
                  "end_message": ""}


def lock_jobs(job_ids) -> list[int]:
    """Take the row locks of `job_ids` (SELECT ... FOR NO KEY UPDATE, in id order so two writers never
    wait on each other in opposite orders) inside the caller's transaction. Returns the ids that exist."""
    ids = sorted({int(j) for j in job_ids})
    return list(Job.objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
                .values_list("pk", flat=True)) if ids else []


def backoff_seconds(attempts: int) -> float:
    """Backoff after the `attempts`-th failed attempt: base * 2**(attempts-1), capped."""
    base = float(getattr(settings, "REQUEUE_BACKOFF_SECONDS", 60))
    cap = float(getattr(settings, "REQUEUE_BACKOFF_CAP_SECONDS", 3600))
    return min(base * 2 ** max(attempts - 1, 0), cap)


def own_failures(job_id) -> int:
    """How many attempts of the job ended in its own failure: restarted after a task failed (outcome
    `restarted`) with a diagnosis that is not its node's or the platform's (`engine.NODE_FAULT_CATEGORIES`).
    Evictions (preempt, reclaim, drain, moves) and platform faults (outcome `requeued`) do not count: the
    backoff's exponent (module docstring)."""
    return (Attempt.objects.filter(job_id=job_id, outcome="restarted")
            .exclude(category__in=NODE_FAULT_CATEGORIES).count())


def requeue_job(job_id, *, at: datetime, kind: str, reason: str, backoff: bool,
                from_states=Job.LIVE_STATES,
                data: dict | None = None, cycle: int | None = None, node=None, actor=None,
                backoff_from: datetime | None = None) -> bool:
    """Send a live gang back to pending whole (see the module docstring). Returns False, changing
    nothing, when the job is no longer in one of `from_states` (a stale request). `backoff_from`: when the
    backoff starts (default `at`): a gang requeued once its survivors of a fault have stopped counts it from the
    fault (execution.stops, "recover" and "restart"), so waiting for them does not lengthen its recovery."""
    lock_jobs([job_id])
    row = Job.objects.filter(pk=job_id, state__in=from_states).values_list("attempts", "state", "queue_id", "name").first()
    if row is None:
        return False
    attempts, old_state, queue_id, name = row
    record = close_attempt(job_id, at=at, outcome="restarted" if kind == "restarted" else "requeued", kind=kind,
                           reason=reason, data=data)
    attempts += 1
    not_before = None
    if backoff:
        # the job's own failure (a restart not laid at its node): exponential in its own failures so far; a platform
        # fault: the base backoff, whatever came before (module docstring)
        own = (record is None or record.category not in NODE_FAULT_CATEGORIES) and kind == "restarted"
        n = max(own_failures(job_id), 1) if own else 1
        not_before = max(at, (backoff_from or at) + timedelta(seconds=backoff_seconds(n)))
    # a job moved by rescheduling keeps the place held for it (Job.reserved, set while it was preempting)
    keep_hold = old_state == Job.State.PREEMPTING and not backoff
    updated = Job.objects.filter(pk=job_id, state=old_state, attempts=attempts - 1).update(
        state=Job.State.PENDING, attempts=attempts, not_before=not_before, started_at=None, bound_at=None,
        preempt_deadline=None, reserved=F("reserved") if keep_hold else None, estimated_start=None, placement_domain="", placement_tier=None,
        stop_target="", stop_reason="", pending_reason=reason[:500], pending_reason_code="",
        updated_at=timezone.now())
    if not updated:
        if record is not None:
            record.delete()
        return False
    released = Allocation.objects.filter(job_id=job_id, released_at__isnull=True).update(released_at=at)
    Task.objects.filter(job_id=job_id).update(state=Task.State.PENDING, node=None, release_deadline=None,
                                              **TASK_RUN_RESET)
    record_event(
        kind, f"{name} requeued whole ({reason}); attempt {attempts}, {count(released, 'GPU')} released"
              # the engine's words and time for it (the pending reason's "retries at <ISO>", new-user re-check 24, R4: the
              # Event cut the time to HH:MM:SS, the reason rounded it to the second)
              + (f", retries at {utc_iso(not_before.timestamp())}" if not_before else ""),
        time=at, job_id=job_id, queue_id=queue_id, node=node, actor=actor, cycle=cycle,
        data={"from": old_state, "attempts": attempts, "released_gpus": released, "reason": reason,
              "not_before": not_before.isoformat() if not_before else None, **(data or {})})
    return True


def evict_job(job_id, *, at: datetime, grace_seconds: float, kind: str, reason: str, data: dict | None = None,
              cycle: int | None = None, node=None, actor=None, event: bool = True,
              evicted_for=None) -> datetime | None:
    """Running (or admitted) gang -> preempting until at + grace; its GPUs stay held until then.
    `evicted_for`: the beneficiary whose plan this eviction is (Job.evicted_for; None: no plan).
    Returns the deadline, or None when the job is no longer running (stale)."""
    deadline = at + timedelta(seconds=grace_seconds)
    if not Job.objects.filter(pk=job_id, state__in=Job.ACTIVE_STATES).update(
            state=Job.State.PREEMPTING, preempt_deadline=deadline, evicted_for=evicted_for, stop_reason=reason[:300],
            updated_at=timezone.now()):
        return None
    if event:
        name, queue_id = Job.objects.filter(pk=job_id).values_list("name", "queue_id").first()
        record_event(kind, f"{name} preempting until {deadline:%H:%M:%S}: {reason}", time=at, job_id=job_id,
                     queue_id=queue_id, node=node, actor=actor, cycle=cycle,
                     data={"reason": reason, "deadline": deadline.isoformat(), **(data or {})})
    return deadline


def release_tasks(task_ids, *, at: datetime) -> int:
    """Free the GPUs of surplus tasks (releasing -> pending, no node). Returns how many tasks moved."""
    lock_jobs(Task.objects.filter(pk__in=list(task_ids)).values_list("job_id", flat=True))
    ids = list(Task.objects.filter(pk__in=list(task_ids), state=Task.State.RELEASING).values_list("id", flat=True))
    if not ids:
        return 0
    Allocation.objects.filter(task_id__in=ids, released_at__isnull=True).update(released_at=at)
    return Task.objects.filter(pk__in=ids, state=Task.State.RELEASING).update(
        state=Task.State.PENDING, node=None, release_deadline=None, release_for=None)


def evict_jobs_on_nodes(node_ids, *, at: datetime, kind: str, reason: str, actor=None, cycle=None) -> list:
    """Gracefully evict every running gang with a task on `node_ids` (each with its queue's grace);
    surplus tasks already releasing there keep their own deadline. Returns the evicted job ids."""
    jobs = dict(Job.objects.filter(state__in=Job.ACTIVE_STATES, tasks__node_id__in=list(node_ids),
                                   tasks__state__in=Task.HELD_STATES)
                .values_list("id", "queue__preemption_grace_seconds").distinct())
    done = []
    for job_id, grace in sorted(jobs.items()):
        if evict_job(job_id, at=at, grace_seconds=grace, kind=kind, reason=reason, actor=actor, cycle=cycle):
            done.append(job_id)
    return done


@transaction.atomic
def report_task_running(task: Task, *, at: datetime | None = None, actor=None) -> bool:
    """A node reports that `task` runs: bound -> running. When no task of its gang is still bound, the job
    goes admitted -> running (started_at = `at`, default: the cluster clock, which the gang-start timeout
    and the time limit compare it with) with an Event. Idempotent for a task already running;
    returns True when something changed. Raises services.ValidationError("state") for a task that is
    neither bound nor running (e.g. its gang was requeued meanwhile)."""
    from .errors import ValidationError

    at = at or clock.now()
    if not Task.objects.filter(pk=task.pk, state=Task.State.BOUND).update(state=Task.State.RUNNING, started_at=at):
        state = Task.objects.filter(pk=task.pk).values_list("state", flat=True).first()
        if state == Task.State.RUNNING:
            return False
        raise ValidationError({"state": f"task is {state}, not bound"})
    job_id = task.job_id
    if Task.objects.filter(job_id=job_id, state=Task.State.BOUND).exists():
        return True
    if Job.objects.filter(pk=job_id, state=Job.State.ADMITTED).update(
            state=Job.State.RUNNING, started_at=at, updated_at=timezone.now()):
        name, queue_id = Job.objects.filter(pk=job_id).values_list("name", "queue_id").first()
        n = Task.objects.filter(job_id=job_id, state=Task.State.RUNNING).count()
        words = "its task" if n == 1 else f"all {n} tasks"  # not "all 1 tasks" (new-user re-check 24, R4)
        record_event("running", f"{name}: {words} running", time=at, job_id=job_id, queue_id=queue_id,
                     actor=actor, data={"tasks": n})
        mark_recovered(job_id, at)
    return True


def end_job(job_id, state: str, *, at: datetime, kind: str, message: str, reason: str = "",
            task_state: str = Task.State.RELEASED, actor=None, cycle: int | None = None,
            from_states=(Job.State.PENDING, *Job.LIVE_STATES), data: dict | None = None) -> bool:
    """End a job: `state` (succeeded | failed | cancelled), finished_at = `at`, every live allocation
    released, every task that has not ended yet -> `task_state`; `reason` is kept as end_reason. One
    Event (`kind`, `message`). Returns False, changing nothing, when the job is no longer in `from_states`."""
    lock_jobs([job_id])
    row = Job.objects.filter(pk=job_id, state__in=from_states).values_list("state", "queue_id").first()
    if row is None:
        return False
    old_state, queue_id = row
    record = close_attempt(job_id, at=at, outcome=state, kind=kind, reason=reason)
    if not Job.objects.filter(pk=job_id, state=old_state).update(
            state=state, finished_at=at, pending_reason="", pending_reason_code="", pending_position=None,
            queue_position=None,
            end_reason=reason[:300], reserved=None,
            preempt_deadline=None, estimated_start=None, stop_target="", stop_reason="", updated_at=timezone.now()):
        if record is not None:
            record.delete()
        return False
    released = Allocation.objects.filter(job_id=job_id, released_at__isnull=True).update(released_at=at)
    Task.objects.filter(job_id=job_id, state__in=Task.OPEN_STATES).update(state=task_state, release_deadline=None)
    record_event(kind, message, time=at, job_id=job_id, queue_id=queue_id, actor=actor, cycle=cycle,
                 data={"state": state, "from": old_state, "released_gpus": released, "reason": reason, **(data or {})})
    close_idle_queues([queue_id], at=at, actor=actor)
    return True


def close_idle_queues(queue_ids=None, *, at: datetime | None = None, actor=None) -> list[str]:
    """Close every `closing` queue (of `queue_ids` and their ancestors, or all when None) with no pending or live
    job left in its subtree (itself and every queue below it: an inner queue closed while its leaves have jobs is
    closing until the last of them ends; new-user trial 11, F7): state -> closed, one `queue_closed` Event each.
    When some queue is closing, holds the queue tree's lock (scheduling.locks.lock_queue_tree) and reads the
    tree, the states and the jobs under it. Returns the names of the queues closed."""
    from .models import Queue  # the queue models sit beside the workload ones; imported here to keep the top small

    if not Queue.objects.filter(state=Queue.State.CLOSING).exists():
        return []
    with transaction.atomic():
        # under the queue tree's lock, read again: a queue moved below a closing one, a job submitted to it, or a
        # reopen, committed meanwhile, is seen (new-user trial 16b, F6: a move under a closing queue and the cancel
        # of its last job at once left it closed with the moved queue's pending job inside)
        lock_queue_tree()
        return _close_idle(queue_ids, at, actor)


def _close_idle(queue_ids, at: datetime | None, actor) -> list[str]:
    from .models import Queue

    closing = dict(Queue.objects.filter(state=Queue.State.CLOSING).values_list("id", "name"))
    if not closing:
        return []
    tree = Tree(Queue.objects.values_list("id", "parent_id"), key=itemgetter(0), parent=itemgetter(1))
    if queue_ids is not None:
        wanted = {a for q in queue_ids for a in tree.ancestors(q)}
        closing = {q: n for q, n in closing.items() if q in wanted}
    busy_leaves = Job.objects.filter(state__in=(Job.State.PENDING, *Job.LIVE_STATES)).values_list(
        "queue_id", flat=True).distinct()
    busy = {a for q in busy_leaves for a in tree.ancestors(q)}
    idle = [(q, n) for q, n in closing.items() if q not in busy]
    if not idle:
        return []
    Queue.objects.filter(pk__in=[q for q, _ in idle], state=Queue.State.CLOSING).update(
        state=Queue.State.CLOSED, updated_at=timezone.now())
    for qid, name in sorted(idle, key=lambda r: r[1]):
        record_event("queue_closed", f"queue {name} closed: its last job ended", time=at, queue_id=qid, actor=actor,
                     data={"queue": name, "from": "closing"})
    return sorted(name for _, name in idle)


def closed_ancestor(queue_id: int | None) -> tuple[str, str] | None:
    """(name, state) of the nearest queue above `queue_id` that is not open (closing, closed, draining): its
    subtree takes no new jobs (job_rules.submit_queue_error; new-user trial 11, F7). None when all are open."""
    from .models import Queue

    seen = set()
    qid = Queue.objects.filter(pk=queue_id).values_list("parent_id", flat=True).first() if queue_id else None
    while qid is not None and qid not in seen:
        seen.add(qid)
        row = Queue.objects.filter(pk=qid).values_list("name", "state", "parent_id").first()
        if row is None:
            return None
        if row[1] != Queue.State.OPEN:
            return row[0], row[1]
        qid = row[2]
    return None
