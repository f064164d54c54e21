"""New-user trial 11, F8: `make test-fast` (SQLite, `-m "not services and not slow"`) failed on a test of a
PostgreSQL row lock run with four threads. Such a test is marked `services` and `postgresql`: test-fast leaves
it out; on SQLite it fails when CI is set (CI runs PostgreSQL: never a silent skip there) and skips otherwise."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHAIN = "tests/api/test_trialfix10b.py::test_concurrent_priority_changes_write_a_chain"


def _pytest(*args: str, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DATABASE_URL")}
    env["DATABASE_URL"] = "sqlite:///" + str(REPO / "unused-by-the-test-runner.sqlite3")  # the runner's is in memory
    env["REDIS_URL"] = ""
    if ci:
        env["CI"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_test_fast_leaves_the_concurrent_row_lock_test_out():
    out = _pytest("--collect-only", "-m", "not services and not slow", "tests/api/test_trialfix10b.py", ci=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_priority_change_reads_the_old_value_from_the_row" in out.stdout  # the file is collected
    assert "test_concurrent_priority_changes_write_a_chain" not in out.stdout


def test_on_sqlite_it_skips_on_a_laptop_and_fails_in_ci():
    laptop = _pytest("-rs", CHAIN, ci=False)
    assert laptop.returncode == 0 and "1 skipped" in laptop.stdout and "PostgreSQL" in laptop.stdout, laptop.stdout
    ci = _pytest(CHAIN, ci=True)
    assert ci.returncode != 0 and "not PostgreSQL" in ci.stdout, ci.stdout
