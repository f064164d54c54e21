"""Validation of a job submission (no writes). Units: GPUs, millicores, MiB, seconds.

`check_job` returns the normalised roles or raises `error_class` (services.ValidationError) with every
broken rule, keyed by field: "queue", "name", "roles", "roles[i].<field>", "topology_mode",
"highest_tier", "preferred_tier", "priority", "time_limit_seconds", "duration_seconds", and for what the
job runs (docs/execution.md) "command", "env", "working_dir", "image", "roles[i].command" ...,
"max_restarts", "completion_role".
"""
from __future__ import annotations

import re
import shlex

from .names import MAX_CHARS, NAME_HELP, NAME_PATTERN, NAME_RE, control_character_error, name_error  # noqa: F401 (re-exported)
from .inputs import text_control_error
from .wording import one_of

ROLE_FIELDS = ("name", "tasks", "gpus_per_task", "cpu_milli", "memory_mib", "min_available", "flavor",
               "command", "env", "working_dir", "image", "group_size", "group_highest_tier", "topology_mode",
               "highest_tier", "gpu_fraction", "gpu_memory_mib", "mig_profile", "mig_count")
# a role's sub-group constraint (DESIGN section 4), stored on JobRole; "topology_mode" / "highest_tier" on a
# role are its shorthand for one group of all the role's tasks (mode hard unless "soft")
GROUP_FIELDS = ("group_size", "group_highest_tier", "group_mode")
SUBGROUP_FIELDS = ("role", "group_size", "group_highest_tier", "topology_mode")
NUMA_POLICIES = ("prefer", "single")
# Tier names accepted wherever a tier number is: "tier-N" (or "tierN", "N") and the field's names for the
# usual three levels of a GPU fabric (DESIGN section 4: 1 = scale-up / NVLink, 2 = leaf, 3 = spine).
TIER_NAMES = {"nvlink": 1, "scale-up": 1, "scaleup": 1, "leaf": 2, "spine": 3}
TIER_NAME = re.compile(r"^tier[-_ ]?(\d{1,5})$")
EXEC_FIELDS = ("command", "env", "working_dir", "image")
TOPOLOGY_MODES = ("none", "soft", "hard")
# Bounds that keep one submission from hurting everyone (a 2**31-task role would stall the cycle and fill
# memory), and keep every number inside the database's integer columns.
MAX_TASKS_PER_JOB = 4096
MAX_GPUS_PER_TASK = 64
MAX_ROLES = 64  # roles of one job (the API's list bound; the submit form builds at most frontend.forms.MAX_FORM_ROLES)
# GPU sharing (DESIGN section 12): a MIG profile as NVIDIA names it, "<slices>g.<memory>gb" (1g.18gb, 3g.71gb)
MIG_PROFILE = re.compile(r"^[1-7]g\.[0-9]{1,4}gb(\+me)?$")
MAX_MIG_INSTANCES = 56  # 7 per GPU x 8 GPUs
MAX_CPU_MILLI = 2**31 - 1
MAX_MEMORY_MIB = 2**31 - 1
MAX_PRIORITY = 2**31 - 1
MAX_TIME_LIMIT_SECONDS = 366 * 24 * 3600
MAX_TIER = 32767
# One wording of the GPU-share rule for gpus_per_task / gpu_fraction on every path: the API's field, the service,
# the what-if (new-user trial 16, F2: three wordings and two ranges, and 0.0015 stored as 0.002)
FRACTION_RULE = "a fraction of one GPU from 0.001 to 0.999 with at most three decimals"
GPUS_PER_TASK_RULE = f"gpus_per_task must be a whole number of GPUs, or {FRACTION_RULE}"
GPU_FRACTION_RULE = f"gpu_fraction must be {FRACTION_RULE}, e.g. 0.5"
# What a task runs: bounded so one submission cannot fill the database or an agent's command line.
MAX_ARGV = 256
MAX_COMMAND_CHARS = 16384
MAX_ENV_VARS = 128
MAX_ENV_NAME_CHARS = 256  # a variable name; longer ones are refused, and named in errors by their first characters
MAX_ENV_VALUE_CHARS = 4096
MAX_PATH_CHARS = 500
MAX_IMAGE_CHARS = 300
MAX_RESTARTS = 100
# One name rule for jobs, roles, queues and teams (names.py), re-exported for the form.
MAX_JOB_NAME_CHARS = MAX_CHARS["job"]
MAX_ROLE_NAME_CHARS = MAX_CHARS["role"]
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
# Set by the platform on every task (gpuplatform/execution/assignments.py); a job may not override them.
PLATFORM_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                "RANK", "NODE_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
PLATFORM_ENV_PREFIX = "GPUPLATFORM_"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_tier(value, field: str) -> tuple[object, dict[str, str]]:
    """A tier given by number or by name (TIER_NAMES, "tier-N") -> (its number, or the value unchanged when
    it is neither a number nor a string, for the number rules to refuse; errors: an unknown name, naming
    it and the names known)."""
    if not isinstance(value, str):
        return value, {}
    text = value.strip().lower()
    if text.isdigit() and len(text) <= 5:
        return int(text), {}
    match = TIER_NAME.match(text)
    if match:
        return int(match.group(1)), {}
    if text in TIER_NAMES:
        return TIER_NAMES[text], {}
    return value, {field: f"unknown tier name {value!r}: give a tier number or one of "
                          f"{sorted(TIER_NAMES)} or 'tier-N'"}


def merge_subgroups(roles, subgroups) -> tuple[list, dict[str, str]]:
    """Fold the job-level `subgroups` list ([{role, group_size, group_highest_tier, topology_mode}]) into
    the role dicts they name (a copy). Errors keyed "subgroups[i]..." for unknown keys or roles."""
    if subgroups in (None, []):
        return roles, {}
    if not isinstance(subgroups, (list, tuple)) or not isinstance(roles, (list, tuple)):
        return roles, {"subgroups": "subgroups must be a list of {role, group_size, group_highest_tier}"}
    errors: dict[str, str] = {}
    out = [dict(r) if isinstance(r, dict) else r for r in roles]
    by_name = {}
    for i, r in enumerate(out):
        if isinstance(r, dict):
            by_name[r.get("name") or ("worker" if len(out) == 1 else f"role{i}")] = r
    for i, sub in enumerate(subgroups):
        key = f"subgroups[{i}]"
        if not isinstance(sub, dict):
            errors[key] = "a sub-group is an object {role, group_size, group_highest_tier}"
            continue
        unknown = set(sub) - set(SUBGROUP_FIELDS)
        if unknown:
            errors[key] = f"unknown fields {sorted(unknown)}"
            continue
        name = sub.get("role", "worker" if len(out) == 1 else None)
        if name not in by_name:
            errors[key + ".role"] = f"no role named {name!r} in this job"
            continue
        for f in ("group_size", "group_highest_tier", "topology_mode"):
            if f in sub:
                by_name[name][f] = sub[f]
    return out, errors


def _check_group(raw: dict, role: dict, f: str, errors: dict[str, str]) -> None:
    """Set role's group_size / group_highest_tier / group_mode from the raw role's keys (rules in ROLE_FIELDS)."""
    mode = raw.get("topology_mode")
    if mode is not None and mode not in TOPOLOGY_MODES:
        errors[f + "topology_mode"] = f"topology_mode must be one of {one_of(TOPOLOGY_MODES)}"
        return
    given = "group_highest_tier" if raw.get("group_highest_tier") is not None else "highest_tier"
    tier, errs = resolve_tier(raw.get(given), f + given)
    errors.update(errs)
    size = raw.get("group_size")
    if size is None and raw.get("highest_tier") is not None:
        size = role["tasks"]  # a tier limit on the role: all its tasks are one group
    if size is None and tier is None or mode == "none":
        role.update(group_size=None, group_highest_tier=None, group_mode="hard")
        return
    if size is None:
        errors[f + "group_size"] = "a sub-group needs group_size (tasks per group)"
    elif not _is_int(size) or size < 1 or size > MAX_TASKS_PER_JOB:
        errors[f + "group_size"] = f"group_size must be a whole number from 1 to {MAX_TASKS_PER_JOB}"
    elif _is_int(role["tasks"]) and size > role["tasks"]:
        errors[f + "group_size"] = f"group_size ({size}) must not exceed tasks ({role['tasks']})"
    if tier is None:
        errors[f + "group_highest_tier"] = "a sub-group needs group_highest_tier (the tier each group stays inside)"
    elif not errs and (not _is_int(tier) or tier < 1 or tier > MAX_TIER):
        errors[f + "group_highest_tier"] = f"group_highest_tier must be a tier number from 1 to {MAX_TIER} or a tier name"
    role.update(group_size=size, group_highest_tier=tier, group_mode="soft" if mode == "soft" else "hard")


def _check_sharing(raw: dict, role: dict, f: str, errors: dict) -> None:
    """The kind of GPU a role's tasks ask for (DESIGN section 12), exactly one: whole GPUs (gpus_per_task), one
    fraction of one GPU (gpu_fraction in (0, 1), or gpus_per_task given as such a fraction, or gpu_memory_mib),
    or mig_count (default 1) MIG instances of mig_profile. Sets role gpu_milli (thousandths), gpu_memory_mib,
    mig_profile and gpus_per_task (1 for a fraction, mig_count for MIG); refusals name the field."""
    gpt = raw.get("gpus_per_task")
    fraction, fraction_field = raw.get("gpu_fraction"), "gpu_fraction"
    if isinstance(gpt, float) and not isinstance(gpt, bool) and 0 < gpt < 1 and fraction is None:
        # "gpus_per_task: 0.5" is a fraction of one GPU; its errors are on gpus_per_task, the field sent
        # (new-user trial 12, F6: 0.0001 was refused on gpu_fraction and as "a whole number" on gpus_per_task)
        fraction, gpt, fraction_field = gpt, None, "gpus_per_task"
    memory, profile, count = raw.get("gpu_memory_mib"), raw.get("mig_profile") or "", raw.get("mig_count")
    # a gpu_fraction given at all is a fraction request (0 is refused below, never read as "whole GPUs")
    kinds = [k for k, v in (("gpu_fraction", fraction), ("gpu_memory_mib", memory), ("mig_profile", profile))
             if (v not in (None, "") if k == "gpu_fraction" else v not in (None, "", 0))]
    role.update(gpu_milli=0, gpu_memory_mib=0, mig_profile="")
    if len(kinds) > 1:
        errors[f + kinds[1]] = (f"a role asks for one kind of GPU: {kinds[0]} or {kinds[1]}, not both "
                                "(whole GPUs, gpu_fraction, gpu_memory_mib or mig_profile)")
        return
    if count is not None and not profile:
        errors[f + "mig_count"] = "mig_count needs mig_profile (the MIG instances' profile, e.g. 1g.18gb)"
        return
    if not kinds:
        if isinstance(raw.get("gpus_per_task"), float) and not float(raw["gpus_per_task"]).is_integer():
            errors[f + "gpus_per_task"] = GPUS_PER_TASK_RULE
        return
    if kinds[0] == "gpu_fraction" and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                       or not 0 < fraction < 1):
        errors[f + "gpu_fraction"] = GPU_FRACTION_RULE
        return
    if gpt not in (None, 1) and kinds[0] != "mig_profile":
        errors[f + "gpus_per_task"] = f"a task with {kinds[0]} takes a share of one GPU: omit gpus_per_task or set it to 1"
        return
    if kinds[0] == "gpu_fraction":
        milli = round(fraction * 1000)
        if not 1 <= milli <= 999 or abs(fraction * 1000 - milli) > 1e-6:  # thousandths are what is stored
            errors[f + fraction_field] = GPU_FRACTION_RULE if fraction_field == "gpu_fraction" else GPUS_PER_TASK_RULE
            return
        role.update(gpu_milli=milli, gpus_per_task=1)
    elif kinds[0] == "gpu_memory_mib":
        if not _is_int(memory) or not 1 <= memory <= MAX_MEMORY_MIB:
            errors[f + "gpu_memory_mib"] = f"gpu_memory_mib must be a whole number of MiB from 1 to {MAX_MEMORY_MIB}"
            return
        role.update(gpu_memory_mib=memory, gpus_per_task=1)
    else:
        if not isinstance(profile, str) or not MIG_PROFILE.match(profile):
            errors[f + "mig_profile"] = "mig_profile must be a MIG profile name such as 1g.18gb or 3g.71gb"
            return
        if gpt not in (None, 1):
            errors[f + "gpus_per_task"] = "a MIG role asks for mig_count instances: omit gpus_per_task"
            return
        count = 1 if count is None else count
        if not _is_int(count) or not 1 <= count <= MAX_MIG_INSTANCES:
            errors[f + "mig_count"] = f"mig_count must be a whole number from 1 to {MAX_MIG_INSTANCES}"
            return
        role.update(mig_profile=profile, gpus_per_task=count)


NO_ROLES = "a job needs at least one role"  # the API's message; the submit form's formset says it too


def check_roles(roles) -> tuple[list[dict], dict[str, str]]:
    """Normalise role dicts (defaults: name worker/role<i>, gpus_per_task 1, cpu/memory 0,
    min_available = tasks, flavor blank) and collect rule violations. Each role asks for one kind of GPU
    (_check_sharing); roles of one job may ask for different kinds (a whole-GPU trainer with fractional or MIG
    workers: one gang, scheduler/core/sharing.py)."""
    errors: dict[str, str] = {}
    if not isinstance(roles, (list, tuple)) or not roles:
        return [], {"roles": NO_ROLES}
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
        min_given = raw.get("min_available") is not None  # else it is derived from tasks: never reported
        role["min_available"] = raw["min_available"] if min_given else role["tasks"]
        for key in EXEC_FIELDS:
            if raw.get(key) not in (None, "", [], {}):
                role[key] = raw[key]
        if name_error("role", role["name"]):
            errors[f + "name"] = name_error("role", role["name"])
        elif role["name"] in names:
            errors[f + "name"] = f"duplicate role name {role['name']!r}"
        if isinstance(role["name"], str):
            names.add(role["name"])
        _check_sharing(raw, role, f, errors)
        for key in ("tasks", "gpus_per_task", "cpu_milli", "memory_mib") + (("min_available",) if min_given else ()):
            if not _is_int(role[key]):
                errors.setdefault(f + key, f"{key} must be a whole number")
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
        if not min_given:
            pass  # = tasks: the tasks rule above already says what is wrong, on the field the user sent
        elif role["min_available"] < 1:
            errors[f + "min_available"] = "min_available must be at least 1"
        elif role["tasks"] >= 1 and role["min_available"] > role["tasks"]:
            errors[f + "min_available"] = (f"min_available ({role['min_available']}) must not exceed "
                                           f"tasks ({role['tasks']})")
        if message := role_flavor_error(role["flavor"]):
            errors[f + "flavor"] = message
        _check_group(raw, role, f, errors)
        out.append(role)
    if not errors and sum(r["tasks"] for r in out) > MAX_TASKS_PER_JOB:
        errors["roles"] = f"a job may have at most {MAX_TASKS_PER_JOB} tasks in all its roles"
    return out, errors


MAX_FLAVOR_CHARS = 200  # a role's flavor, all its '|' alternatives (the column's length)


def role_flavor_error(flavor) -> str | None:
    """The rule of a role's `flavor`, or None: empty (any GPU model), or GPU model names separated by '|' (either),
    each by the name rule (names.py, as a quota's flavor: quota_rules.flavor_error), at most 200 characters in all.
    New-user trial 15, F2: "philly-gpu|<script>...", a newline and a bare "|" were stored as sent (the empty
    alternative silently dropped)."""
    if not isinstance(flavor, str) or len(flavor) > MAX_FLAVOR_CHARS:
        return f"flavor must be GPU model names separated by '|', at most {MAX_FLAVOR_CHARS} characters"
    if not flavor:
        return None
    for name in flavor.split("|"):
        if not name:
            return f"flavor {flavor[:40]!r} has an empty GPU model name: give models separated by '|' (H100|A100)"
        if not NAME_RE.match(name):
            return f"a flavor is GPU model names that use {NAME_HELP}, separated by '|'; {name[:40]!r} is not one"
    return None


def submit_queue_error(queue, *, has_children: bool, team=None, closed_ancestor: tuple[str, str] | None = None
                       ) -> str | None:
    """The rule a queue breaks as the target of a new job: not open (closing, closed, draining), under a queue
    that is not open (`closed_ancestor`: lifecycle.closed_ancestor's (name, state); new-user trial 11, F7), not
    a leaf, or another team's. One rule for submission (check_job) and the what-if's `submit` change
    (scheduling.forecast.check_submit_changes; new-user trial 10, F3). None when it takes the job."""
    if queue.state != "open":
        return f"queue {queue.name} is {queue.state} and accepts no new jobs"
    if closed_ancestor is not None:
        return (f"queue {queue.name} is under queue {closed_ancestor[0]}, which is {closed_ancestor[1]}: "
                f"it accepts no new jobs")
    if has_children:
        return f"queue {queue.name} is not a leaf queue; submit to one of its children"
    if queue.team_id is not None and team is not None and queue.team_id != team.pk:
        return f"queue {queue.name} belongs to another team"
    return None


def no_such_tier(tier, tiers) -> str:
    """A tier the cluster has not: "no such tier in this cluster: 3 (tiers: [1, 2])" (`tiers`: the engine's,
    queries.cluster_tiers). The API, gpuctl and the submit form say it in these words."""
    return f"no such tier in this cluster: {tier} (tiers: {sorted(tiers) or 'none'})"


def check_placement_and_limit(*, topology_mode, highest_tier, preferred_tier, time_limit_seconds, tiers: set[int],
                              time_limit_field: str = "time_limit_seconds") -> dict[str, str]:
    """A job's topology (topology_mode, highest_tier and preferred_tier: tiers this cluster has) and time limit
    (1 s .. 366 days) rules: one rule for submission (check_job) and the what-if's `submit` change
    (scheduling.forecast.check_submit_changes, its `time_limit` as `time_limit_field`; new-user trial 11, F5:
    tier 5 of a 3-tier cluster and a 10^12 s limit were forecast). Tiers already resolved (resolve_tier)."""
    errors: dict[str, str] = {}
    if topology_mode not in TOPOLOGY_MODES:
        errors["topology_mode"] = f"topology_mode must be one of {one_of(TOPOLOGY_MODES)}"
    elif topology_mode == "hard" and highest_tier is None:
        errors["highest_tier"] = "a hard topology constraint needs highest_tier (the highest tier it may span)"
    for key, tier in (("highest_tier", highest_tier), ("preferred_tier", preferred_tier)):
        if tier is None:
            continue
        if not _is_int(tier) or tier < 1 or tier > MAX_TIER:
            errors[key] = f"{key} must be a tier number from 1 to {MAX_TIER}"
        elif tier not in tiers:
            errors[key] = no_such_tier(tier, tiers)
    if (key := "preferred_tier") not in errors and "highest_tier" not in errors and highest_tier is not None \
            and preferred_tier is not None and preferred_tier > highest_tier:
        errors[key] = f"preferred_tier ({preferred_tier}) must not be above highest_tier ({highest_tier})"
    if time_limit_seconds is not None and (not _is_int(time_limit_seconds) or time_limit_seconds <= 0
                                           or time_limit_seconds > MAX_TIME_LIMIT_SECONDS):
        errors[time_limit_field] = (f"{time_limit_field} must be a whole number of seconds from 1 to "
                                    f"{MAX_TIME_LIMIT_SECONDS} (366 days)")
    return errors


def check_job(*, team, queue, queue_has_children: bool, name, roles, priority, topology_mode, highest_tier,
              preferred_tier, time_limit_seconds, duration_seconds, tiers: set[int], error_class,
              command=None, env=None, working_dir="", image="", max_restarts=0, completion_role="",
              container_runtimes: set[str] = frozenset(), numa="prefer", subgroups=None,
              closed_ancestor: tuple[str, str] | None = None) -> list[dict]:
    """All submission rules; `tiers` is the set of domain tiers present in the cluster. Returns the roles
    normalised, each with its resolved command, env, working_dir and image (check_execution) and its
    sub-group (group_size, group_highest_tier, group_mode; from the role's keys or the job's `subgroups`).
    Tiers are numbers or names (resolve_tier); the caller resolves the job-level ones first."""
    roles, errors = merge_subgroups(roles, subgroups)
    out, role_errors = check_roles(roles)
    errors.update(role_errors)
    if numa not in NUMA_POLICIES:
        errors["numa"] = f"numa must be one of {one_of(NUMA_POLICIES)}"
    for i, role in enumerate(out):
        tier = role.get("group_highest_tier")
        key = f"roles[{i}].group_highest_tier"
        if _is_int(tier) and key not in errors and tier not in tiers:
            errors[key] = no_such_tier(tier, tiers)
    if not any(k.startswith("roles") for k in errors):
        errors.update(check_execution(out, command=command, env=env, working_dir=working_dir, image=image,
                                      max_restarts=max_restarts, completion_role=completion_role,
                                      simulated=duration_seconds is not None, container_runtimes=container_runtimes))
    if name_error("job", name):
        errors["name"] = name_error("job", name)
    if queue_error := submit_queue_error(queue, has_children=queue_has_children, team=team,
                                         closed_ancestor=closed_ancestor):
        errors["queue"] = queue_error
    if not _is_int(priority):
        errors["priority"] = "priority must be a whole number"
    elif abs(priority) > MAX_PRIORITY:
        errors["priority"] = f"priority must be between -{MAX_PRIORITY} and {MAX_PRIORITY}"
    errors.update(check_placement_and_limit(topology_mode=topology_mode, highest_tier=highest_tier,
                                            preferred_tier=preferred_tier, time_limit_seconds=time_limit_seconds,
                                            tiers=tiers))
    if duration_seconds is not None and (not isinstance(duration_seconds, (int, float)) or duration_seconds < 0
                                         or duration_seconds > 10 * MAX_TIME_LIMIT_SECONDS):
        errors["duration_seconds"] = "duration_seconds must be between 0 and ten years"
    if errors:
        raise error_class(errors)
    return out


def parse_command(value, field: str = "command") -> tuple[list[str], dict[str, str]]:
    """argv from a list of strings, or a string split with shlex (POSIX rules). None / "" / [] -> [].
    Returns (argv, errors)."""
    if value is None or value == "" or value == []:
        return [], {}
    if isinstance(value, str):
        if len(value) > MAX_COMMAND_CHARS:
            return [], {field: f"command must be at most {MAX_COMMAND_CHARS} characters"}
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            return [], {field: f"command is not a valid shell word list ({exc})"}
    elif isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value):
        argv = list(value)
    else:
        return [], {field: "command must be an argv list of strings or a string"}
    if not argv or not argv[0].strip():
        return [], {field: "command must name a program"}
    if len(argv) > MAX_ARGV:
        return [], {field: f"command may have at most {MAX_ARGV} arguments"}
    if sum(len(a) for a in argv) > MAX_COMMAND_CHARS:
        return [], {field: f"command must be at most {MAX_COMMAND_CHARS} characters"}
    if any("\x00" in a for a in argv):
        return [], {field: "command must not contain NUL characters"}
    for i, arg in enumerate(argv):  # the free-text rule (inputs.text_control_error): no escape, no U+202E
        where = text_control_error(arg)
        if where:
            return [], {field: f"command must be text without control characters other than newline and tab, nor "
                               f"invisible format characters (argument {i}: {where})"}
    return argv, {}


def env_name_shown(name) -> str:
    """A variable name as an error shows it (in the field path too): whole up to 40 characters, else its
    first 40 and '...'."""
    text = name if isinstance(name, str) else repr(name)
    return text if len(text) <= 40 else text[:40] + "..."


def env_name_too_long(name: str) -> str:
    """The rule an over-long variable name breaks (the API, the job form and gpuctl say it alike)."""
    return f"a variable name is at most {MAX_ENV_NAME_CHARS} characters (this one has {len(name)})"


def _env_key(field: str, name, index: int, taken) -> str:
    """The field an error about variable `name` is reported on: `env.NAME` with the whole name when it is at
    most MAX_ENV_NAME_CHARS characters; an over-long (or non-string) one by its first 40 and '...', and
    `#<index>` (its place in the object) when that is already an error's key, so two errors never merge."""
    if isinstance(name, str) and len(name) <= MAX_ENV_NAME_CHARS:
        key = f"{field}.{name}"
    else:
        key = f"{field}.{env_name_shown(name)}"
    return f"{key}#{index}" if key in taken else key


def check_env(value, field: str = "env") -> tuple[dict[str, str], dict[str, str]]:
    """{name: value} with names like shell variables, not set by the platform (PLATFORM_ENV, GPUPLATFORM_*),
    string values (numbers are turned into strings). Returns (env, errors)."""
    if value is None or value == {}:
        return {}, {}
    if not isinstance(value, dict):
        return {}, {field: "env must be an object of NAME: value"}
    if len(value) > MAX_ENV_VARS:
        return {}, {field: f"env may have at most {MAX_ENV_VARS} variables"}
    out, errors = {}, {}
    for index, (name, val) in enumerate(value.items()):
        key = _env_key(field, name, index, errors)
        if isinstance(name, str) and len(name) > MAX_ENV_NAME_CHARS:
            errors[key] = env_name_too_long(name)
        elif not isinstance(name, str) or not ENV_NAME.match(name):
            errors[key] = "a variable name is letters, digits and _ and does not start with a digit"
        elif name in PLATFORM_ENV or name.startswith(PLATFORM_ENV_PREFIX):
            errors[key] = f"{name} is set by the platform for every task and cannot be overridden"
        elif not isinstance(val, str):  # strings must be strings: 1 is refused, not stored as "1"
            errors[key] = "a value must be a string"
        elif len(val) > MAX_ENV_VALUE_CHARS or "\x00" in val:
            errors[key] = f"a value must be at most {MAX_ENV_VALUE_CHARS} characters, without NUL"
        elif text_control_error(val):  # the free-text rule (inputs.text_control_error): no escape, no U+202E
            errors[key] = (f"a value must be text without control characters other than newline and tab, nor "
                           f"invisible format characters ({text_control_error(val)})")
        else:
            out[name] = val
    return out, errors


def _check_text(value, field: str, limit: int, pattern=None, rule: str = "") -> tuple[str, dict[str, str]]:
    """A one-line text field (a working directory, an image): a string of at most `limit` characters, without
    control or format characters (names.control_character_error, on the text as sent), not only white space
    ("\\n" is refused, never trimmed to the field left empty: trial 21, F13), then trimmed and matched to
    `pattern` (`rule` its refusal). Returns (value, errors)."""
    if value is None:
        return "", {}
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        return "", {field: f"{field.split('.')[-1]} must be a string of at most {limit} characters"}
    if control_character_error(field.split(".")[-1], value):
        return "", {field: control_character_error(field.split(".")[-1], value)}
    if value and not value.strip():
        return "", {field: f"{field.split('.')[-1]} must not be only white space: give a value, or leave it empty"}
    value = value.strip()
    if value and pattern is not None and not pattern.match(value):
        return "", {field: rule}
    return value, {}


def _check_dir(value, field: str) -> tuple[str, dict[str, str]]:
    """A working directory: blank (the task's own directory on the node) or an absolute path. A relative one was
    resolved against the node agent's work directory, which the user neither sees nor controls (new-user trial 13,
    F14: `../../etc` ran in a directory beside the agent's)."""
    value, bad = _check_text(value, field, MAX_PATH_CHARS)  # (its control characters: new-user trial 14, F16)
    if value and not value.startswith("/"):
        return "", {field: f"{field.split('.')[-1]} must be an absolute path (starting with /) or blank for the "
                           f"task's own directory on the node, got {value[:80]!r}"}
    return value, bad


def check_execution(roles: list[dict], *, command, env, working_dir, image, max_restarts, completion_role,
                    simulated: bool, container_runtimes: set[str]) -> dict[str, str]:
    """What each role runs (docs/execution.md). Fills every role's command / env / working_dir / image in
    place, a role without its own inheriting the job's (env: the job's, then the role's over it).
    `simulated`: a replayed trace job (duration_seconds given) may go without a command; every other job
    needs one. `container_runtimes`: the runtimes node agents reported; an image needs one. Returns errors."""
    errors: dict[str, str] = {}
    job_argv, bad = parse_command(command, "command")
    errors.update(bad)
    job_env, bad = check_env(env, "env")
    errors.update(bad)
    job_dir, bad = _check_dir(working_dir, "working_dir")
    errors.update(bad)
    job_image, bad = _check_text(image, "image", MAX_IMAGE_CHARS, IMAGE_REF, "image must be an image reference "
                                 "such as nvcr.io/nvidia/pytorch:24.05-py3")
    errors.update(bad)
    for i, role in enumerate(roles):
        f = f"roles[{i}]."
        argv, bad = parse_command(role.get("command"), f + "command")
        errors.update(bad)
        role_env, bad = check_env(role.get("env"), f + "env")
        errors.update(bad)
        role_dir, bad = _check_dir(role.get("working_dir"), f + "working_dir")
        errors.update(bad)
        role_image, bad = _check_text(role.get("image"), f + "image", MAX_IMAGE_CHARS, IMAGE_REF,
                                      "image must be an image reference such as nvcr.io/nvidia/pytorch:24.05-py3")
        errors.update(bad)
        role["command"] = argv or list(job_argv)
        role["env"] = {**job_env, **role_env}
        role["working_dir"] = role_dir or job_dir
        role["image"] = role_image or job_image
        if role["image"] and not container_runtimes:
            errors[f + "image" if role_image else "image"] = (
                "no node agent of this cluster has a container runtime (docker or podman): submit without an "
                "image, or start the agents with --runtime")
    with_cmd = [r for r in roles if r["command"]]
    if not with_cmd and not simulated and "command" not in errors and not any(k.endswith("command") for k in errors):
        errors["command"] = ("a job needs a command: an argv list or a string, for the whole job or per role "
                             "(only replayed trace jobs, which carry duration_seconds, run without one)")
    elif with_cmd and len(with_cmd) < len(roles):
        for i, r in enumerate(roles):
            if not r["command"]:
                errors[f"roles[{i}].command"] = (f"role {r['name']} has no command and the job has none for it "
                                                 f"to inherit")
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or not 0 <= max_restarts <= MAX_RESTARTS:
        errors["max_restarts"] = f"max_restarts must be a whole number from 0 to {MAX_RESTARTS}"
    if completion_role and completion_role not in {r["name"] for r in roles}:
        errors["completion_role"] = (f"completion_role must be one of the job's roles "
                                     f"({', '.join(r['name'] for r in roles)})")
    return errors
