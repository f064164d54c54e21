"""An attempt's record when it ends, its diagnosis and what the diagnosis does (docs/diagnosis.md).

`close_attempt(job_id, at=, outcome=, kind=, reason=)` is called by lifecycle.requeue_job and end_job
inside their transaction, before the gang's tasks are reset: it reads what the attempt left (each placed
task's exit and log tail, the health events of its nodes in the DIAGNOSIS_HEALTH_WINDOW_SECONDS before
the end, the platform's own cause), diagnoses it (engine.diagnose), stores an Attempt row, and acts:
`exclude_node` adds the node to Job.excluded_nodes; a hardware or network diagnosis counts toward the
node's repeat-offender health rule (signal repeat_offender_jobs: different jobs within
REPEAT_OFFENDER_WINDOW_SECONDS; shipped: 3 -> cordon). `diagnose_now(job_id)` is the same diagnosis before the attempt ends (the
failing task's report decides `cancel_retries` with it). `mark_recovered(job_id, at)` closes the
previous attempt's recovery time when every task of the next one runs. `refresh_late_evidence(job_id,
number, at=)` diagnoses an ended job's last attempt again when a task's last log lines arrive after it was
recorded (its stop deadline passed first): the stored diagnosis then reads the whole log.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum, Window

from ..audit import record_event
from ..models import Allocation, Attempt, Event, Job, Node, Task, TaskLog
from ..models.cluster import lost_node_q
from . import engine, tables

__all__ = ["attempt_exit", "close_attempt", "diagnose_now", "lost_nodes", "mark_recovered", "platform_cause",
           "refresh_attempt_exit", "refresh_late_evidence", "reuse_evidence", "HARDWARE_OR_NETWORK"]

HARDWARE_OR_NETWORK = ("gpu_hardware", "nccl_network")
LOG_TAIL_BYTES = 256 * 1024
STOP_SIGNALS = (9, 15)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


PLATFORM_FAULTS = ("agent_exited",)  # the structured causes of a requeued_after_failure that name a platform fault


def platform_cause(kind: str, outcome: str, reason: str, data: dict | None = None) -> tuple[dict | None, bool]:
    """(platform cause for engine.diagnose or None, whether the attempt ended by a fault) from how the
    lifecycle ended it: kind of the requeue / end Event, the state it ends in, its reason and its Event's `data`.
    A requeued_after_failure whose data["cause"] is one of PLATFORM_FAULTS ("agent_exited": execution.reports, a
    task stopped because its node agent exited) is that cause, {"cause", "text": reason, "node": data["node"]}."""
    reason = reason or ""
    data = data if isinstance(data, dict) else {}
    if outcome == "succeeded":
        return None, False
    if kind == "cancelled" or outcome == "cancelled":
        return {"cause": "cancelled", "text": reason}, False
    if kind in ("requeued", "stopped_for_spare"):  # stopped for another job (on a spare: at once), not a fault
        return {"cause": "preempted", "text": reason}, False
    if kind == "gang_start_timeout":
        return {"cause": "gang_start_timeout", "text": reason}, True
    if kind == "requeued_after_failure":
        if data.get("cause") in PLATFORM_FAULTS:
            return {"cause": data["cause"], "text": reason, "node": str(data.get("node") or "")}, True
        if reason.startswith("node lost"):
            return {"cause": "node_lost", "text": reason}, True
        return None, True  # a GPU failed: the health events say which
    if reason.startswith("time limit"):
        return {"cause": "time_limit", "text": reason}, True
    return None, True


def lost_nodes(nodes, reason: str, at: datetime) -> list[tuple[str, datetime | None]]:
    """The attempt's nodes that were lost, as (name, last heartbeat), the earliest silence first: of `nodes`, those
    `reason` names (failure detection's and the Slurm backend's "node lost: 2 task(s) failed on n0"), else those
    not_ready or silent beyond HEARTBEAT_TIMEOUT_SECONDS at `at`. A node that never sent a heartbeat has None."""
    rows = list(Node.objects.filter(name__in=list(nodes)).values_list("name", "last_heartbeat", "state"))
    named = [r for r in rows if re.search(rf"(?<![\w.-]){re.escape(r[0])}(?![\w.-])", reason or "")]
    if not named:
        named = list(Node.objects.filter(lost_node_q(at), name__in=list(nodes))
                     .values_list("name", "last_heartbeat", "state"))
    return sorted(((n, last) for n, last, _ in named), key=lambda r: (r[1] is None, r[1] or at, r[0]))


def _node_lost_cause(cause: dict | None, nodes, reason: str, at: datetime) -> tuple[dict | None, datetime | None]:
    """A node_lost platform cause with the lost node's name and last heartbeat added (engine.diagnose names it:
    new-user trial 19, F4), and that heartbeat (None when unknown)."""
    if not cause or cause.get("cause") != "node_lost":
        return cause, None
    lost = lost_nodes(nodes, reason, at)
    if not lost:
        return cause, None
    name, last = lost[0]
    if last is None:  # a node that never sent one (the Slurm backend's, an imported one): its name only
        return {**cause, "node": name}, None
    return {**cause, "node": name, "heartbeat": f"{name}: last heartbeat at {last:%Y-%m-%d %H:%M:%S} UTC"}, last


def _fault_at(fault_at: datetime | None, cause: dict | None, last_heartbeat: datetime | None, job: dict,
              started: datetime, at: datetime) -> datetime | None:
    """When the attempt's fault happened (docs/diagnosis.md: recovery runs from the fault; new-user trial 19, F5: a
    lost node's and a time limit's counted from their detection). A lost node: its last heartbeat (its processes
    were gone from then on; the requeue comes HEARTBEAT_TIMEOUT + NODE_FAILURE_GRACE later), not before the attempt
    began (a node already silent when the gang was bound). A time limit: when the limit was reached (the job's
    start, or its binding while it was still starting, + time_limit_seconds, as execution.enforce_time_limits
    counts it), not the SIGKILL at the end of the stop's grace. Otherwise the first failing task's end (None: the
    end itself)."""
    kind = (cause or {}).get("cause")
    if kind == "node_lost" and last_heartbeat is not None:
        fault = max(last_heartbeat, started)
    elif kind == "time_limit" and job.get("time_limit_seconds") and (job["started_at"] or job["bound_at"]):
        fault = (job["started_at"] or job["bound_at"]) + timedelta(seconds=job["time_limit_seconds"])
    else:
        return fault_at
    return min(fault, fault_at or at, at)


def attempt_exit(rows: list[dict], cause: dict | None, outcome: str) -> tuple[str, int | None, int | None] | None:
    """(failed_task, exit_code, signal) of an attempt that ends as `outcome` from its tasks (`rows`: _task_rows) and
    its platform cause (platform_cause). A success blames no task (the other roles' SIGTERM after the completion role's
    exit 0 is the platform's): None. A time limit blames no task either: failed_task "", and the exit of the first task (earliest ended_at)
    that ended by a signal or a non-zero code, the platform's SIGTERM or SIGKILL (new-user trial 21, F12: the task said
    signal 9, the job and its attempt null). Otherwise the first task to fail, by its role[index]. None when no task
    says (the job's own fields then stand). The one derivation of the job's and the attempt's exit: close_attempt
    writes both from it, and refresh_attempt_exit when a task's end is reported after the attempt was recorded."""
    if outcome == "succeeded":
        return None
    ordered = sorted(rows, key=lambda r: (r["ended_at"] is None, r["ended_at"].timestamp() if r["ended_at"] else 0.0))
    if (cause or {}).get("cause") == "time_limit":
        for r in ordered:
            if r["exit_signal"] is not None or (r["exit_code"] or 0) != 0:
                return "", r["exit_code"], r["exit_signal"]
        return None
    for r in ordered:
        if r["state"] == Task.State.FAILED:
            return f"{r['role__name']}[{r['index']}]", r["exit_code"], r["exit_signal"]
    return None


def refresh_attempt_exit(job_id: int, number: int) -> bool:
    """A task of attempt `number` of the ended job `job_id` reported its end after the attempt was recorded (a time
    limit's SIGKILL at the stop deadline): the attempt's and the job's failed_task / exit_code / exit_signal are
    derived again from the tasks (attempt_exit) when the attempt ended failed and it is the job's last one. Returns
    True when they changed. Call inside the report's transaction."""
    job = Job.objects.filter(pk=job_id).values("attempts", "state", "failed_task", "exit_code", "exit_signal",
                                               "end_reason").first()
    if job is None or job["attempts"] != number or job["state"] not in Job.FINAL_STATES:
        return False
    attempt = (Attempt.objects.filter(job_id=job_id, number=number)
               .values("pk", "outcome", "failed_task", "exit_code", "signal").first())
    if attempt is None or attempt["outcome"] != Job.State.FAILED:
        return False
    derived = attempt_exit(_task_rows(job_id), platform_cause("", attempt["outcome"], job["end_reason"])[0],
                           attempt["outcome"])
    if derived is None:
        return False
    label, code, sig = derived
    changed = False
    if (attempt["failed_task"], attempt["exit_code"], attempt["signal"]) != derived:
        Attempt.objects.filter(pk=attempt["pk"]).update(failed_task=label, exit_code=code, signal=sig)
        changed = True
    if (job["failed_task"], job["exit_code"], job["exit_signal"]) != derived:
        Job.objects.filter(pk=job_id).update(failed_task=label, exit_code=code, exit_signal=sig)
        changed = True
    return changed


def _task_rows(job_id: int) -> list[dict]:
    return list(Task.objects.filter(job_id=job_id, node__isnull=False).values(
        "id", "role__name", "index", "node__name", "state", "ended_at", "exit_code", "exit_signal", "end_message"))


def _log_tails(task_ids: list[int], number: int) -> dict[int, tuple[str, int]]:
    """task id -> (text, byte offset where it starts) of the last LOG_TAIL_BYTES kept for (task, attempt), in
    one query for every task: each task's chunks newest first, a chunk kept while the ones after it hold
    less than LOG_TAIL_BYTES (a running sum over the task's chunks; the same tail as reading them one by one)."""
    if not task_ids:
        return {}
    after = Window(Sum("size"), partition_by=[F("task_id")], order_by=F("offset").desc())
    rows = (TaskLog.objects.filter(task_id__in=task_ids, attempt=number).annotate(after=after)
            .filter(after__lt=LOG_TAIL_BYTES + F("size")).order_by("task_id", "offset")
            .values_list("task_id", "offset", "data"))
    chunks: dict[int, list] = {}
    for task_id, offset, data in rows:
        chunks.setdefault(task_id, []).append((offset, data))
    return {t: ("".join(d for _, d in c), c[0][0]) for t, c in chunks.items()}


def _evidence(job_id: int, number: int, end: datetime, started: datetime | None):
    rows = _task_rows(job_id)
    failed_ends = [r["ended_at"] for r in rows if r["state"] == Task.State.FAILED and r["ended_at"]]
    fault_at = min(failed_ends) if failed_ends else None
    tasks = []
    tails = _log_tails([r["id"] for r in rows], number)
    for r in rows:
        text, off = tails.get(r["id"], ("", 0))
        if r["end_message"] and r["state"] == Task.State.FAILED and r["exit_code"] is None and r["exit_signal"] is None:
            text += ("\n" if text else "") + r["end_message"]
        own = (r["ended_at"] is not None and (fault_at is None or r["ended_at"] <= fault_at
                                              or r["exit_signal"] not in STOP_SIGNALS))
        tasks.append(engine.TaskEvidence(
            task=f"{r['role__name']}[{r['index']}]", node=r["node__name"],
            ended_at=r["ended_at"].timestamp() if r["ended_at"] else None, exit_code=r["exit_code"],
            signal=r["exit_signal"], own_end=own, log=text, log_offset=off,
            failed=r["state"] == Task.State.FAILED))
    nodes = sorted({r["node__name"] for r in rows})
    window = timedelta(seconds=_setting("DIAGNOSIS_HEALTH_WINDOW_SECONDS", 300))
    since = min(started, end - window) if started else end - window
    health = []
    for name, message, data, time in (Event.objects.filter(node__name__in=nodes, kind__in=("gpu_health", "health_rule"),
                                                           time__gte=since, time__lte=end + timedelta(seconds=1))
                                      .order_by("time").values_list("node__name", "message", "data", "time")):
        data = data or {}
        category = data.get("category")
        if category is None:  # a plain GPU health change: hardware when a GPU went unhealthy
            category = "gpu_hardware" if any(c.get("to") == "unhealthy" for c in data.get("changes", [])) else ""
        if category:
            health.append(engine.HealthEvidence(node=name, text=message, time=time.timestamp(), category=category,
                                                rule=data.get("rule", "")))
    return tasks, health, nodes, fault_at, rows


# Within one request, the evidence diagnose_now read for (job, attempt, at) is what close_attempt would read
# again when the same request ends the attempt (a failing task's report: the preview decides
# cancel_retries, then the gang is requeued or ended at the same instant): reuse_evidence() keeps it.
_EVIDENCE: ContextVar[dict | None] = ContextVar("diagnosis_evidence", default=None)


@contextmanager
def reuse_evidence():
    """Inside this block, an attempt's evidence is read and diagnosed once for one instant `at`."""
    token = _EVIDENCE.set({})
    try:
        yield
    finally:
        _EVIDENCE.reset(token)


def _evidence_once(job_id: int, number: int, at: datetime, started: datetime | None):
    memo = _EVIDENCE.get()
    key = (job_id, number, at)
    if memo is not None and key in memo:
        return memo[key]
    found = _evidence(job_id, number, at, started)
    if memo is not None:
        memo[key] = found
    return found


def diagnose_now(job_id: int, *, at: datetime) -> engine.Diagnosis:
    """The diagnosis of the job's current attempt from what has been reported so far."""
    number, started, bound = Job.objects.filter(pk=job_id).values_list("attempts", "started_at", "bound_at").first()
    tasks, health, _, _, _ = _evidence_once(job_id, number, at, started or bound)
    return engine.diagnose(tasks, rules=tables.rule_set(), health=health)


def close_attempt(job_id: int, *, at: datetime, outcome: str, kind: str, reason: str,
                  data: dict | None = None) -> Attempt | None:
    """Record the attempt that ends now (module docstring). `data`: the requeue / end Event's data (its "cause"
    may name a platform fault: platform_cause). Returns the Attempt, or None when the job never got bound in this
    attempt (a pending job cancelled) or it is already recorded."""
    job = Job.objects.filter(pk=job_id).values("attempts", "started_at", "bound_at", "name", "queue_id",
                                               "failed_task", "exit_code", "exit_signal", "excluded_nodes",
                                               "time_limit_seconds").first()
    if job is None or (job["bound_at"] is None and job["started_at"] is None):
        return None
    number = job["attempts"]
    if Attempt.objects.filter(job_id=job_id, number=number).exists():
        return None
    started = job["bound_at"] or job["started_at"]
    cause, failed = platform_cause(kind, outcome, reason, data)
    diagnosis = None
    if outcome == "succeeded":  # nothing to diagnose: no log or health reads (the trace replay ends many)
        rows = _task_rows(job_id)
        tasks, health, nodes, fault_at = [], [], sorted({r["node__name"] for r in rows}), None
    else:
        tasks, health, nodes, fault_at, rows = _evidence_once(job_id, number, at, started)
        cause, last_heartbeat = _node_lost_cause(cause, nodes, reason, at)
        diagnosis = engine.diagnose(tasks, rules=tables.rule_set(), health=health, platform=cause)
        if fault_at is None and (cause or {}).get("cause") in PLATFORM_FAULTS:
            # the task the platform fault stopped is `released`, not failed (execution.reports: trial 22, F5): the
            # fault is its end, the task the requeue's data names
            ends = [r["ended_at"] for r in rows if r["ended_at"]
                    and f"{r['role__name']}[{r['index']}]" == (data or {}).get("task")]
            fault_at = min(ends) if ends else None
        fault_at = _fault_at(fault_at, cause, last_heartbeat, job, started, at)
        if cause is None and not any(t.failed for t in tasks) and diagnosis.category == "unknown" and not failed:
            diagnosis = None
    gpus = Allocation.objects.filter(job_id=job_id, released_at__isnull=True).count()
    label, code, sig = attempt_exit(rows, cause, outcome) or (job["failed_task"], job["exit_code"], job["exit_signal"])
    if (label, code, sig) != (job["failed_task"], job["exit_code"], job["exit_signal"]):
        Job.objects.filter(pk=job_id).update(failed_task=label, exit_code=code, exit_signal=sig)
    try:
        # Callers hold the job's row lock (lifecycle.lock_jobs), so two ends of one attempt do not race here;
        # should one still pass the exists() check, the unique (job, number) index decides: the loser records
        # nothing, and its caller's conditional update of the job loses as well (requeue_job / end_job).
        with transaction.atomic():
            attempt = Attempt.objects.create(
                job_id=job_id, number=number, started_at=started, ended_at=at, outcome=outcome, failed=failed,
                nodes=nodes, gpus=gpus, gpu_seconds=round(gpus * max((at - started).total_seconds(), 0.0), 3),
                failed_task=label, exit_code=code, signal=sig,
                category=diagnosis.category if diagnosis else "", diagnosis=diagnosis.to_dict() if diagnosis else None,
                fault_at=(fault_at or at) if failed else None)
    except IntegrityError:
        return None
    if diagnosis is None or not failed:  # a preempted or cancelled attempt keeps its `platform` diagnosis quietly
        return attempt
    record_event("diagnosed", f"{job['name']} attempt {number}: {diagnosis.category} ({diagnosis.summary[:200]}); "
                              f"action {diagnosis.action}", time=at, job_id=job_id, queue_id=job["queue_id"],
                 data={"attempt": number, "category": diagnosis.category, "action": diagnosis.action,
                       "rule": diagnosis.rule, "node": diagnosis.node, "task": diagnosis.task})
    if (diagnosis.action == "exclude_node" and diagnosis.node and outcome in ("restarted", "requeued")
            and diagnosis.node not in (job["excluded_nodes"] or [])):
        Job.objects.filter(pk=job_id).update(excluded_nodes=[*(job["excluded_nodes"] or []), diagnosis.node])
        record_event("node_excluded", f"{job['name']}: later attempts avoid {diagnosis.node} ({diagnosis.category}) "
                                      "unless nothing else fits", time=at, job_id=job_id,
                     data={"node": diagnosis.node, "category": diagnosis.category, "attempt": number})
    if failed and diagnosis.category in HARDWARE_OR_NETWORK and diagnosis.node:
        _repeat_offender(diagnosis.node, at)
    return attempt


def refresh_late_evidence(job_id: int, number: int, *, at: datetime, text: str | None = None) -> bool:
    """Diagnose attempt `number` of job `job_id` again from the logs held now, when output of one of its
    tasks arrived after the attempt was recorded: a gang stopped toward `failed` ends at its stop deadline,
    and a rank that was slow to exit ships its last lines (the watchdog's timeout, a late XID) after that.
    Only the job's last attempt of an ended job is refreshed (its tasks still describe it), only a failed
    attempt diagnosed from its tasks (a platform cause does not read logs), and only the stored diagnosis
    changes, audited as a `diagnosis_updated` Event; the job's end is not redone (no node exclusion for a job that
    has ended), but a category that becomes a hardware or network one counts toward its node's repeat-offender
    rule as it would have at the end. `text`: the late output (with the start of the line it continues): when
    no rule matches a line of it, nothing it adds can change the diagnosis and the gang's logs are not read again
    (review 13, R5: every late chunk re-read every rank's tail). Returns True when the diagnosis changed."""
    rules = tables.rule_set()
    if text is not None and not engine.log_matches(text, rules):
        return False
    job = Job.objects.filter(pk=job_id).values("attempts", "state", "name", "queue_id").first()
    if job is None or job["attempts"] != number or job["state"] not in Job.FINAL_STATES:
        return False
    attempt = Attempt.objects.filter(job_id=job_id, number=number, failed=True, diagnosis__isnull=False).first()
    if attempt is None or str(attempt.diagnosis.get("rule", "")).startswith("platform:"):
        return False
    tasks, health, _, _, _ = _evidence(job_id, number, attempt.ended_at, attempt.started_at)
    diagnosis = engine.diagnose(tasks, rules=rules, health=health)
    if diagnosis.to_dict() == attempt.diagnosis:
        return False
    before = attempt.category
    Attempt.objects.filter(pk=attempt.pk).update(diagnosis=diagnosis.to_dict(), category=diagnosis.category)
    what = f"{diagnosis.category} (was {before})" if diagnosis.category != before else f"{before}, more evidence"
    record_event("diagnosis_updated", f"{job['name']} attempt {number}: {what} from log lines that arrived after it "
                                      f"ended ({diagnosis.summary[:200]})",
                 time=at, job_id=job_id, queue_id=job["queue_id"],
                 data={"attempt": number, "category": diagnosis.category, "was": before, "rule": diagnosis.rule,
                       "node": diagnosis.node, "task": diagnosis.task, "evidence": len(diagnosis.evidence)})
    if diagnosis.category in HARDWARE_OR_NETWORK and before not in HARDWARE_OR_NETWORK and diagnosis.node:
        _repeat_offender(diagnosis.node, attempt.ended_at)  # review 13, R3: as the end would have counted it
    return True


def _repeat_offender(node_name: str, at: datetime) -> None:
    """The health rules on `repeat_offender_jobs` (shipped: >= 3 -> cordon): the number of different jobs
    whose attempt failed with a hardware or network diagnosis on the node within
    REPEAT_OFFENDER_WINDOW_SECONDS (24 h) is judged like any other signal; each rule met writes a
    `health_rule` Event once per count, and cordon / drain take a ready node out (record: the Event only)."""
    from .health import take_out

    window = _setting("REPEAT_OFFENDER_WINDOW_SECONDS", 24 * 3600)
    jobs = set(Attempt.objects.filter(failed=True, category__in=HARDWARE_OR_NETWORK, diagnosis__node=node_name,
                                      ended_at__gte=at - timedelta(seconds=window)).values_list("job_id", flat=True))
    _, rules = tables.health_rules()
    fired = engine.evaluate_health({"repeat_offender_jobs": len(jobs)}, rules)
    node = Node.objects.filter(name=node_name).first()
    if not fired or node is None:
        return
    reason = (f"repeat offender: attempts of {len(jobs)} different jobs failed with a hardware or network "
              f"diagnosis on it within {window / 3600:g} h")
    for rule in fired:
        key = f"{rule.id}:{len(jobs)}"
        if not Event.objects.filter(node=node, kind="health_rule", data__key=key,
                                    time__gte=at - timedelta(seconds=window)).exists():
            record_event("health_rule", f"{node_name}: repeat_offender_jobs={len(jobs)}: rule {rule.id} -> {rule.action}",
                         time=at, node=node, data={"key": key, "rule": rule.id, "signal": rule.signal,
                                                   "value": len(jobs), "action": rule.action, "category": rule.category,
                                                   "source": rule.source, "jobs": sorted(jobs)})
    action = engine.strongest(r.action for r in fired if r.action in ("cordon", "drain"))
    if action:
        rule = next(r for r in fired if r.action == action)
        take_out(node, Node.State.DRAINING if action == "drain" else Node.State.CORDONED, at=at, reason=reason,
                 data={"rule": rule.id, "jobs": sorted(jobs)})


def mark_recovered(job_id: int, at: datetime) -> None:
    """Every task of the job's current attempt runs: the previous attempt's interruption is over."""
    number = Job.objects.filter(pk=job_id).values_list("attempts", flat=True).first()
    if not number:
        return
    prev = (Attempt.objects.filter(job_id=job_id, number=number - 1, recovered_at__isnull=True,
                                   outcome__in=("restarted", "requeued")).values("id", "fault_at", "ended_at").first())
    if prev is None:
        return
    began = prev["fault_at"] or prev["ended_at"]
    Attempt.objects.filter(pk=prev["id"]).update(recovered_at=at,
                                                 recovery_seconds=round(max((at - began).total_seconds(), 0.0), 3))
