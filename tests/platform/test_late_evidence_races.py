"""Late log lines and the end of their attempt, under concurrency (review 13, notes/review13.md R1, R2, R7).

append_log stores a chunk and, for an ended job's last attempt, diagnoses it again (diagnosis.attempts.
refresh_late_evidence). Without a lock: two late chunks refreshed at once stored the diagnosis of whichever read
the logs first (R1); a chunk stored while the cycle ended the job at its stop deadline was read by neither the end
nor a refresh (R2); a reader saw the late line in the log before the diagnosis had read it (R7). append_log now
holds the job's row (lifecycle.lock_jobs, as the end does) for a chunk of an attempt that is ending or has ended,
and stores the chunk and the refreshed diagnosis in one transaction."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from gpuplatform.diagnosis import attempts as attempts_mod
from gpuplatform.execution import logs as logs_mod
from gpuplatform.execution import read_log
from gpuplatform.models import Attempt, Task
from gpuplatform.scheduling import store
from tests.platform.test_diagnosis_attempts import OOM, WATCHDOG, log, two_ranks_one_failed
from tests.platform.test_execution import agents, at  # noqa: F401

pytestmark = [pytest.mark.services, pytest.mark.postgresql("row locks: PostgreSQL"),
              pytest.mark.django_db(transaction=True)]


def _run(*targets):
    """Run each (name, function) in its own thread (its own connection); re-raise the first error."""
    errors = []

    def wrap(fn):
        def run():
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
            finally:
                connection.close()
        return run

    threads = [threading.Thread(target=wrap(fn), name=name) for name, fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_two_late_chunks_at_once_both_reach_the_diagnosis(submit, agents, monkeypatch):
    """Rank 0's watchdog line (A) and rank 1's OOM (B) arrive together after the job failed. Without the lock, A
    read the logs before B's chunk, B stored cuda_oom, then A stored nccl_timeout over it."""
    job, t0, t1 = two_ranks_one_failed(submit, "race", "step 1\n", exit_code=1)
    store.run_cycle_once(clock=at(30 + 3600))
    a_read, b_done = threading.Event(), threading.Event()
    evidence = attempts_mod._evidence

    def reading(*args, **kw):
        found = evidence(*args, **kw)
        if threading.current_thread().name == "A":
            a_read.set()
            b_done.wait(3)  # B runs meanwhile (unless A holds the job: then B waits for A)
        return found

    monkeypatch.setattr(attempts_mod, "_evidence", reading)

    def b():
        a_read.wait(10)
        log(t1, OOM + "\n", offset=7)
        b_done.set()

    _run(("A", lambda: log(t0, WATCHDOG + "\n")), ("B", b))
    a = Attempt.objects.get(job=job)
    assert (a.category, a.diagnosis["task"]) == ("cuda_oom", "worker[1]"), a.diagnosis
    assert any(e["text"] == WATCHDOG for e in a.diagnosis["evidence"]), a.diagnosis


def test_a_chunk_stored_while_the_cycle_ends_the_job_is_read(submit, agents, monkeypatch):
    """The agent's request has read `preempting` and stores its chunk while the cycle ends the job at its stop
    deadline: the end reads the chunk, or the chunk's refresh reads the end's record (not neither)."""
    job, t0, t1 = two_ranks_one_failed(submit, "toctou", "step 1\n", exit_code=1)
    about_to_insert, cycle_done = threading.Event(), threading.Event()
    create = logs_mod.TaskLog.objects.create

    def slow_create(**kw):
        if threading.current_thread().name == "agent":
            about_to_insert.set()
            cycle_done.wait(3)
        return create(**kw)

    monkeypatch.setattr(logs_mod.TaskLog.objects, "create", slow_create)

    def cycle():
        about_to_insert.wait(10)
        try:
            store.run_cycle_once(clock=at(30 + 3600))
        finally:
            cycle_done.set()

    _run(("agent", lambda: log(t1, OOM + "\n", offset=7)), ("cycle", cycle))
    job.refresh_from_db()
    assert job.state == "failed" and Attempt.objects.get(job=job).category == "cuda_oom"


def test_a_late_line_is_in_the_log_no_sooner_than_in_the_diagnosis(submit, agents, monkeypatch):
    """test_diagnosis_agents waits for rank 0's line in its log, then reads the diagnosis: another connection must
    not see the line while the diagnosis still lacks it."""
    job, t0, t1 = two_ranks_one_failed(submit, "seen", OOM + "\n", exit_code=1)
    store.run_cycle_once(clock=at(30 + 3600))
    diagnose, seen = attempts_mod.engine.diagnose, {}

    def peek():
        seen["log"] = WATCHDOG in read_log(Task.objects.get(pk=t0.pk), attempt=0)["data"]
        seen["evidence"] = any(e["text"] == WATCHDOG for e in Attempt.objects.get(job=job).diagnosis["evidence"])

    def diagnosing(*args, **kw):
        _run(("peek", peek))  # a reader while the refresh diagnoses
        return diagnose(*args, **kw)

    monkeypatch.setattr(attempts_mod.engine, "diagnose", diagnosing)
    log(t0, WATCHDOG + "\n")
    assert seen == {"log": False, "evidence": False}, seen
    assert any(e["text"] == WATCHDOG for e in Attempt.objects.get(job=job).diagnosis["evidence"])
