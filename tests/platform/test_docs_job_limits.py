"""docs/api.md's table of one job's limits says what job_rules enforces (new-user trial 10, F17: the role limits
were undocumented): every bound of a submission appears in the table, so changing one without the docs fails."""
from __future__ import annotations

import re
from pathlib import Path

from gpuplatform import job_rules
from gpuplatform.names import MAX_CHARS

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _table() -> dict[str, str]:
    text = DOC.read_text()
    block = text[text.index("**Limits of one job**"):text.index("## Idempotency-Key")]
    rows = [line.split("|")[1:3] for line in block.splitlines() if line.startswith("| `")]
    return {field.strip(): limit.strip() for field, limit in rows}


def test_the_documented_limits_are_the_enforced_ones():
    table = _table()
    from frontend.forms import MAX_FORM_ROLES

    expect = {
        # the role count (new-user trial 12, F15: undocumented; the form's 16 and the API's 64 differ)
        "`roles`": [f"1 to {job_rules.MAX_ROLES} roles", f"at most {MAX_FORM_ROLES}"],
        "`roles[i].tasks`": [f"1 to {job_rules.MAX_TASKS_PER_JOB} per role", f"{job_rules.MAX_TASKS_PER_JOB} tasks in all"],
        "`roles[i].gpus_per_task`": [f"0 to {job_rules.MAX_GPUS_PER_TASK}"],
        "`roles[i].mig_count`": [f"1 to {job_rules.MAX_MIG_INSTANCES}"],
        "`roles[i].cpu_milli`, `roles[i].memory_mib`": [f"0 to {job_rules.MAX_CPU_MILLI}", str(job_rules.MAX_MEMORY_MIB)],
        "`roles[i].group_size`": [f"1 to {job_rules.MAX_TASKS_PER_JOB}"],
        "`roles[i].name`": [f"{MAX_CHARS['role']} characters"],
        "`roles[i].flavor`": [f"{job_rules.MAX_FLAVOR_CHARS} characters", "name rule", "none empty"],
        "`name`": [f"{MAX_CHARS['job']} characters"],
        "`priority`": [f"-{job_rules.MAX_PRIORITY} to {job_rules.MAX_PRIORITY}"],
        "`time_limit_seconds`": [str(job_rules.MAX_TIME_LIMIT_SECONDS)],
        "`highest_tier`, `preferred_tier`, `roles[i].group_highest_tier`": [f"1 to {job_rules.MAX_TIER}"],
        "`command`": [f"{job_rules.MAX_ARGV} arguments", f"{job_rules.MAX_COMMAND_CHARS} characters"],
        "`env`": [f"{job_rules.MAX_ENV_VARS} variables", f"names {job_rules.MAX_ENV_NAME_CHARS} characters",
                  f"values {job_rules.MAX_ENV_VALUE_CHARS}"],
        "`working_dir`": [f"{job_rules.MAX_PATH_CHARS} characters"],
        "`image`": [f"{job_rules.MAX_IMAGE_CHARS} characters"],
        "`max_restarts`": [str(job_rules.MAX_RESTARTS)],
    }
    assert set(table) == set(expect)
    for field, parts in expect.items():
        for part in parts:  # whole numbers: "4096" does not pass for "40960"
            assert re.search(rf"(?<![\d-]){re.escape(part)}(?!\d)", table[field]), (field, part, table[field])
