"""Commands on an unmigrated database say "run `python manage.py migrate` first" (no traceback), and
`replay --trace PATH` reads one's own trace file (Philly or openb format) with the importers' errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "data" / "topology" / "volcano" / "hypernodes_tree_s0-s6.yaml"


@pytest.mark.parametrize("argv", [
    ["import_topology", str(TOPOLOGY), "--format", "hypernode", "--dry-run"],
    ["export_topology", "--format", "slurm-conf"],
    ["agent_token", "node-1"],  # new-user trial 16, F14: a traceback ending "relation auth_user does not exist"
    ["telemetry_maintain"],
    ["slurm_backend", "--once"],
])
def test_commands_on_an_unmigrated_database_say_migrate_first(tmp_path, argv):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}", "REDIS_URL": ""}
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "run `python manage.py migrate` first" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "no such table" not in done.stderr


# the commands that need no migrated database: replay (no database), gpu_agent (talks to the API), demo (migrates)
NO_DATABASE = {"replay", "gpu_agent", "demo"}


def test_every_command_of_the_platform_checks_the_migrations_first():
    """Each of the platform's own commands but NO_DATABASE is a DatabaseCommand (new-user trial 16, F14: two
    were not), so a command added later is held to the rule docs/operations.md states for all of them."""
    import importlib
    import pkgutil

    from gpuplatform.management import commands
    from gpuplatform.management.base import DatabaseCommand

    names = {m.name for m in pkgutil.iter_modules(commands.__path__)}
    assert NO_DATABASE <= names
    plain = sorted(n for n in names - NO_DATABASE
                   if not issubclass(importlib.import_module(f"{commands.__name__}.{n}").Command, DatabaseCommand))
    assert plain == []


def test_require_migrated_passes_on_a_migrated_database(db):
    from gpuplatform.management.base import require_migrated, unapplied_migrations

    assert unapplied_migrations() == []
    require_migrated()


PHILLY_ROWS = ["timestamp,duration,num_gpus,gpu_time,cluster",
               "2017-10-09 07:01:55,600.0,1,600.0,11cb48",
               "2017-10-09 07:05:00,1200.0,8,9600.0,11cb48",
               "2017-10-09 08:00:00,60.0,2,120.0,6214e9"]


def test_replay_reads_ones_own_trace_file(tmp_path, capsys):
    trace = tmp_path / "my_jobs.csv"
    trace.write_text("\n".join(PHILLY_ROWS) + "\n")
    out = tmp_path / "report.json"
    call_command("replay", "--cluster", "philly", "--trace", str(trace), "--json", str(out))
    printed = capsys.readouterr().out
    assert "trace my_jobs: 3 jobs" in printed
    assert out.exists() and '"trace"' in out.read_text()


@pytest.mark.parametrize("content,message", [
    ("name,size\nx,1\n", "my_jobs.csv line 1: not a trace this product reads"),
    ("\n".join(PHILLY_ROWS[:2] + ["2017-10-09 07:05:00,1200.0,x,9600.0,11cb48"]) + "\n",
     "my_jobs.csv line 3, column num_gpus"),
    (None, "my_jobs.csv: no such file"),
])
def test_replay_trace_file_errors_name_the_file_and_line(tmp_path, content, message):
    trace = tmp_path / "my_jobs.csv"
    if content is not None:
        trace.write_text(content)
    with pytest.raises(CommandError) as err:
        call_command("replay", "--cluster", "philly", "--trace", str(trace))
    assert message in str(err.value)
