"""What a job runs and how it ended, as the job page shows it (docs/execution.md). Pure functions over the
model rows: no queries of their own.

Every exit status on the page (the job's headline and each task's row) goes through `exit_text`, so one
number always reads the same way.
"""
from __future__ import annotations

import shlex
import signal as _signal

from gpuplatform.models import Job

STOP_TARGET_TEXT = {"": "requeue", "requeue": "requeue", "restart": "restart", "cancelled": "cancelled",
                    "failed": "failed", "succeeded": "succeeded", "recover": "requeue after a fault"}


def command_line(argv) -> str:
    """argv list -> one shell-quoted line a person can paste back (shlex.join); [] or None -> ""."""
    if not argv:
        return ""
    if isinstance(argv, str):
        return argv
    return shlex.join(str(a) for a in argv)


def signal_name(number: int) -> str:
    """9 -> "SIGKILL"; a number this platform does not name -> ""."""
    try:
        return _signal.Signals(number).name
    except (ValueError, TypeError):
        return ""


def exit_text(exit_code: int | None, exit_signal: int | None) -> str:
    """How a process ended: "exit code 3", "signal 9 (SIGKILL)", "" when neither is known."""
    if exit_signal is not None:
        name = signal_name(exit_signal)
        return f"signal {exit_signal} ({name})" if name else f"signal {exit_signal}"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return ""


def run_groups(roles) -> list[dict]:
    """Roles grouped by what they run, in role order: [{"roles": "all roles" | "worker, eval", "command":
    shell line, "argv": [...], "env": [(name, value), ...] sorted by name, "working_dir": str, "image": str}].
    One group when every role runs the same thing (then labelled "all roles", or the single role's name)."""
    groups: dict[tuple, dict] = {}
    for role in roles:
        env = sorted((role.env or {}).items())
        key = (tuple(role.command or ()), tuple(env), role.working_dir, role.image)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"names": [], "command": command_line(role.command), "argv": list(role.command or ()),
                                   "env": env, "working_dir": role.working_dir, "image": role.image}
        group["names"].append(role.name)
    out = list(groups.values())
    for g in out:
        g["roles"] = "all roles" if len(out) == 1 and len(roles) > 1 else ", ".join(g["names"])
    return out


def stop_text(job: Job) -> str:
    """While a job is preempting with a stop target: "ends as <target> by <deadline> (<reason>)"; the deadline
    is the server's time (Y-m-d H:i:s, the page's format) and is left out when unknown; else ""."""
    if job.state != Job.State.PREEMPTING or not job.stop_target:
        return ""
    text = f"ends as {STOP_TARGET_TEXT.get(job.stop_target, job.stop_target)}"
    if job.preempt_deadline:
        from django.utils import timezone

        text += f" by {timezone.localtime(job.preempt_deadline):%Y-%m-%d %H:%M:%S}"
    if job.stop_reason:
        text += f" ({job.stop_reason})"
    return text


def task_rows(tasks) -> list[dict]:
    """One dict per task for the tasks table and the log view's task choice: {"task": Task, "label":
    "worker-0", "exit": exit_text, "ended": bool}."""
    return [{"task": t, "label": f"{t.role.name}-{t.index}", "exit": exit_text(t.exit_code, t.exit_signal),
             "ended": t.ended_at is not None} for t in tasks]


def attempt_rows(job) -> list[dict]:
    """The job's ended attempts for the attempts table, newest first: {"a": Attempt, "exit", "nodes",
    "recovery"} (recovery: human text of fault -> every task running again, "" if not recovered)."""
    rows = []
    for a in sorted(job.attempt_records.all(), key=lambda a: -a.number):
        rows.append({"a": a, "exit": exit_text(a.exit_code, a.signal), "nodes": ", ".join(a.nodes or []),
                     "recovery": f"{a.recovery_seconds:.1f} s" if a.recovery_seconds is not None else ""})
    return rows


def diagnosis_view(job, tasks) -> dict | None:
    """The diagnosis shown at the top of the page: that of the last failed attempt (Attempt.diagnosis), with
    each evidence line's task id (the log view highlights it): {"attempt", "d", "evidence": [{..., "task_id"}],
    "highlight": {"attempt", "task", "lines": [{"task", "text"}]}}; None when no attempt failed."""
    failed = [a for a in job.attempt_records.all() if a.failed and a.diagnosis]
    if not failed:
        return None
    a = max(failed, key=lambda a: a.number)
    ids = {f"{t.role.name}[{t.index}]": t.pk for t in tasks}
    evidence = [{**e, "task_id": ids.get(e.get("task"))} for e in a.diagnosis.get("evidence", [])]
    lines = [{"task": e["task_id"], "text": e["text"]} for e in evidence if e.get("source") == "log" and e["task_id"]]
    first = lines[0]["task"] if lines else ids.get(a.diagnosis.get("task"))
    return {"attempt": a, "d": a.diagnosis, "evidence": evidence,
            "highlight": {"attempt": a.number, "task": first, "lines": lines}}
