"""New-user trial 22, G6: a cancel's what-if said of job 11 "it takes the GPUs job 10 holds at 0.0 h from now without
the change; with the change job 10 starts later or elsewhere", while job 10's start did not change (it went to other
GPUs at the same moment) and "0.0 h from now" was a minute ahead. The words now say what the other job really does,
name the cancelled job whose GPUs let it start, and give a time under an hour in minutes or seconds."""
from __future__ import annotations

from types import SimpleNamespace

from scheduler.core.testing import World
from scheduler.forecast.whatif import Why, describe, explain, from_now, what_if


def by_limit(job, elapsed):
    t = job.time_limit or 3600.0
    return t, t


def test_a_cancel_names_the_cancelled_job_not_one_whose_start_does_not_move():
    """j7 holds n1's GPUs 0-3 (to 2000 s), r n2's 0-3 (to 3000 s); j10 (4 GPUs) starts now on n1's 4-7 in both
    cases (on n2 with the change), j11 (8 GPUs) waits for a whole node without the change and takes n1 now with it:
    what lets it start is j7's cancel, not j10 "starting later or elsewhere"."""
    w = World().nodes(count=2, gpus=8)
    w.queue(name="a", quota={"H100": 16}, limit={"H100": 16})
    w.running(name="j7", queue="a", nodes=["n1"], gpus_per_task=4, started=0.0, time_limit=2000.0)
    w.running(name="r", queue="a", nodes=["n2"], gpus_per_task=4, started=0.0, time_limit=3000.0)
    w.job(name="j10", queue="a", gpus_per_task=4, submit=1.0, time_limit=50000.0)
    w.job(name="j11", queue="a", gpus_per_task=8, submit=2.0, time_limit=5000.0)
    out = what_if(w.snapshot(now=100.0), [{"kind": "cancel", "job": "j7"}], by_limit, resolution=0.0)
    assert (out.before["j10"].start, out.after["j10"].start) == (100.0, 100.0)
    assert (out.before["j11"].start, out.after["j11"].start) == (3000.0, 100.0)
    assert "j10" not in out.why
    assert (out.why["j11"].cause, out.why["j11"].job) == ("cancelled", "j7")
    assert describe(out.why["j11"]) == ("starts earlier, at 100 s: on GPUs of job j7 (some at least), which the "
                                        "change cancels")


def _f(start):
    return SimpleNamespace(start=start)


N1 = [("n1", 0), ("n1", 1)]
N2 = [("n2", 0), ("n2", 1)]


def test_a_displaced_job_whose_start_does_not_move_is_said_to_start_on_other_gpus():
    """k holds n1 from 100 s without the change; with it k starts at 100 s on n2 (which x, cancelled, held) and j
    takes n1 at 100 s instead of 900 s. It read "k starts later or elsewhere"."""
    runs_b = {"k": [(100.0, 5000.0, N1)], "j": [(900.0, 2000.0, N1)], "x": [(0.0, 4000.0, N2)]}
    runs_a = {"k": [(100.0, 5000.0, N2)], "j": [(100.0, 1200.0, N1)]}
    why = explain({"k": _f(100.0), "j": _f(900.0)}, {"k": _f(100.0), "j": _f(100.0)}, runs_b, runs_a, [],
                  removed=["x"])
    assert set(why) == {"j"}
    w = why["j"]
    assert (w.cause, w.job, w.other, w.via, w.via_cancelled) == ("displaced", "k", "moved", "x", True)
    text = describe(w, when=lambda t: from_now(t, 40.0))
    assert text == ("starts earlier: it takes the GPUs job k holds in 1 min without the change; with the change "
                    "job k starts at the same time on other GPUs: those of job x, which the change cancels")
    assert "later" not in text


def test_a_displaced_job_says_only_what_the_other_job_does():
    head = "starts earlier: it takes the GPUs job k holds at 100 s without the change; with the change job k "
    assert describe(Why("earlier", "displaced", "k", 100.0, other="later")) == head + "starts later"
    assert describe(Why("earlier", "displaced", "k", 100.0, other="earlier")) == head + "starts sooner, on other GPUs"
    assert describe(Why("earlier", "displaced", "k", 100.0, other="moved")) == (
        head + "starts at the same time on other GPUs, free then")


def test_times_under_an_hour_are_in_minutes_or_seconds():
    assert [from_now(t, 1000.0) for t in (1000.0, 1040.0, 1060.0, 1000.0 + 1800, 1000.0 + 3600, 1000.0 + 9000)] == [
        "now", "in 40 s", "in 1 min", "in 30 min", "in 1.0 h", "in 2.5 h"]
