"""The local demo's last line says what each job not finished at its stop was, counted in words (new-user trial 26,
F9): on Ctrl-C with one job stopping and another pending it said "(1 job(s) were still live ...)", which named
neither the stopping job nor the pending one. Now "(1 job stopping, 1 pending; ...)", "2 jobs running", "1 process
it started still runs"."""
from __future__ import annotations

import pytest

from gpuplatform.management.commands import demo
from gpuplatform.models import Job


@pytest.mark.django_db
def test_the_stop_line_names_a_stopping_and_a_pending_job(submit):
    stopping, _pending = submit("stopping"), submit("waiting")
    Job.objects.filter(pk=stopping.pk).update(state="preempting", stop_target="cancelled")
    line = demo.local_stop_message("local demo", demo.job_state_counts(), [])
    assert line.startswith("local demo stopped (1 job stopping, 1 pending; every process it started is gone, "
                           "checked;"), line


@pytest.mark.parametrize("counts, words", [
    ({"running": 1}, "1 job running"),
    ({"running": 2, "preempting": 1}, "2 jobs running, 1 stopping"),
    ({"admitted": 1, "pending": 3}, "1 job admitted, 3 pending"),
    ({"pending": 2}, "2 jobs pending"),
    ({"succeeded": 4, "failed": 1, "cancelled": 2}, "no job live or pending"),
    ({}, "no job live or pending"),
])
def test_the_jobs_are_counted_by_state_in_singular_and_plural(counts, words):
    line = demo.local_stop_message("local demo", counts, [])
    assert line.startswith(f"local demo stopped ({words}; every process"), line
    assert "(s)" not in line


def test_the_processes_still_running_are_counted_in_singular_and_plural():
    one = demo.local_stop_message("local demo", {"running": 1}, [41])
    assert one == "local demo stopped (1 job running); 1 process it started still runs: pid 41 (kill it with kill -9)"
    two = demo.local_stop_message("federation demo", None, [41, 42])
    assert two == "federation demo stopped; 2 processes it started still run: pid 41 42 (kill them with kill -9)"
