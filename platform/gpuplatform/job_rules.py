"""Validation of a job submission (no writes). Units: GPUs, millicores, MiB, seconds.

`check_job` returns the normalised roles or raises `error_class` (services.ValidationError) with every
broken rule, keyed by field: "queue", "name", "roles", "roles[i].<field>", "topology_mode",
"highest_tier", "preferred_tier", "priority", "time_limit_seconds", "duration_seconds".
"""
from __future__ import annotations

ROLE_FIELDS = ("name", "tasks", "gpus_per_task", "cpu_milli", "memory_mib", "min_available", "flavor")
TOPOLOGY_MODES = ("none", "soft", "hard")
# Bounds that keep one submission from hurting everyone (a 2**31-task role would stall the cycle and fill
# memory), and keep every number inside the database's integer columns.
MAX_TASKS_PER_JOB = 4096
MAX_GPUS_PER_TASK = 64
MAX_CPU_MILLI = 2**31 - 1
MAX_MEMORY_MIB = 2**31 - 1
MAX_PRIORITY = 2**31 - 1
MAX_TIME_LIMIT_SECONDS = 366 * 24 * 3600
MAX_TIER = 32767


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_roles(roles) -> tuple[list[dict], dict[str, str]]:
    """Normalise role dicts (defaults: name worker/role<i>, gpus_per_task 1, cpu/memory 0,
    min_available = tasks, flavor blank) and collect rule violations."""
    errors: dict[str, str] = {}
    if not isinstance(roles, (list, tuple)) or not roles:
        return [], {"roles": "a job needs at least one role"}
    out, names = [], set()
    for i, raw in enumerate(roles):
        f = f"roles[{i}]."
        unknown = set(raw) - set(ROLE_FIELDS)
        if unknown:
            errors[f"roles[{i}]"] = f"unknown fields {sorted(unknown)}"
            continue
        role = {"name": raw.get("name") or ("worker" if len(roles) == 1 else f"role{i}"),
                "tasks": raw.get("tasks", 1), "gpus_per_task": raw.get("gpus_per_task", 1),
                "cpu_milli": raw.get("cpu_milli", 0) or 0, "memory_mib": raw.get("memory_mib", 0) or 0,
                "flavor": raw.get("flavor") or ""}
        role["min_available"] = role["tasks"] if raw.get("min_available") is None else raw["min_available"]
        if role["name"] in names:
            errors[f + "name"] = f"duplicate role name {role['name']!r}"
        names.add(role["name"])
        for key in ("tasks", "gpus_per_task", "cpu_milli", "memory_mib", "min_available"):
            if not _is_int(role[key]):
                errors[f + key] = f"{key} must be a whole number"
        if any(k.startswith(f) for k in errors):
            continue
        if role["tasks"] < 1:
            errors[f + "tasks"] = "tasks must be at least 1"
        elif role["tasks"] > MAX_TASKS_PER_JOB:
            errors[f + "tasks"] = f"tasks must be at most {MAX_TASKS_PER_JOB}"
        if role["gpus_per_task"] < 0:
            errors[f + "gpus_per_task"] = "gpus_per_task must not be negative"
        elif role["gpus_per_task"] > MAX_GPUS_PER_TASK:
            errors[f + "gpus_per_task"] = f"gpus_per_task must be at most {MAX_GPUS_PER_TASK}"
        elif role["gpus_per_task"] == 0 and role["cpu_milli"] <= 0:
            errors[f + "gpus_per_task"] = "a task with no GPU must request CPU (cpu_milli > 0)"
        for key, top in (("cpu_milli", MAX_CPU_MILLI), ("memory_mib", MAX_MEMORY_MIB)):
            if role[key] < 0:
                errors[f + key] = f"{key} must not be negative"
            elif role[key] > top:
                errors[f + key] = f"{key} must be at most {top}"
        if role["min_available"] < 1:
            errors[f + "min_available"] = "min_available must be at least 1"
        elif role["tasks"] >= 1 and role["min_available"] > role["tasks"]:
            errors[f + "min_available"] = (f"min_available ({role['min_available']}) must not exceed "
                                           f"tasks ({role['tasks']})")
        if not isinstance(role["flavor"], str) or len(role["flavor"]) > 200:
            errors[f + "flavor"] = "flavor must be GPU model names separated by '|'"
        out.append(role)
    if not errors and sum(r["tasks"] for r in out) > MAX_TASKS_PER_JOB:
        errors["roles"] = f"a job may have at most {MAX_TASKS_PER_JOB} tasks in all its roles"
    return out, errors


def check_job(*, team, queue, queue_has_children: bool, name, roles, priority, topology_mode, highest_tier,
              preferred_tier, time_limit_seconds, duration_seconds, tiers: set[int], error_class) -> list[dict]:
    """All submission rules; `tiers` is the set of domain tiers present in the cluster."""
    out, errors = check_roles(roles)
    if not name or not str(name).strip():
        errors["name"] = "name must not be empty"
    elif len(name) > 200:
        errors["name"] = "name must be at most 200 characters"
    if queue.state != "open":
        errors["queue"] = f"queue {queue.name} is {queue.state} and accepts no new jobs"
    elif queue_has_children:
        errors["queue"] = f"queue {queue.name} is not a leaf queue; submit to one of its children"
    elif queue.team_id is not None and team is not None and queue.team_id != team.pk:
        errors["queue"] = f"queue {queue.name} belongs to another team"
    if not _is_int(priority):
        errors["priority"] = "priority must be a whole number"
    elif abs(priority) > MAX_PRIORITY:
        errors["priority"] = f"priority must be between -{MAX_PRIORITY} and {MAX_PRIORITY}"
    if topology_mode not in TOPOLOGY_MODES:
        errors["topology_mode"] = f"topology_mode must be one of {TOPOLOGY_MODES}"
    elif topology_mode == "hard" and highest_tier is None:
        errors["highest_tier"] = "a hard topology constraint needs highest_tier (the highest tier it may span)"
    for key, tier in (("highest_tier", highest_tier), ("preferred_tier", preferred_tier)):
        if tier is None:
            continue
        if not _is_int(tier) or tier < 1 or tier > MAX_TIER:
            errors[key] = f"{key} must be a tier number from 1 to {MAX_TIER}"
        elif tier not in tiers:
            errors[key] = f"no such tier in this cluster: {tier} (tiers: {sorted(tiers) or 'none'})"
    if (key := "preferred_tier") not in errors and "highest_tier" not in errors and highest_tier is not None \
            and preferred_tier is not None and preferred_tier > highest_tier:
        errors[key] = f"preferred_tier ({preferred_tier}) must not be above highest_tier ({highest_tier})"
    if time_limit_seconds is not None and (not _is_int(time_limit_seconds) or time_limit_seconds <= 0
                                           or time_limit_seconds > MAX_TIME_LIMIT_SECONDS):
        errors["time_limit_seconds"] = (f"time_limit_seconds must be a whole number of seconds from 1 to "
                                        f"{MAX_TIME_LIMIT_SECONDS} (366 days)")
    if duration_seconds is not None and (not isinstance(duration_seconds, (int, float)) or duration_seconds < 0
                                         or duration_seconds > 10 * MAX_TIME_LIMIT_SECONDS):
        errors["duration_seconds"] = "duration_seconds must be between 0 and ten years"
    if errors:
        raise error_class(errors)
    return out
