"""The GPU-hour ledger (scheduler.core.gpu_hours, DESIGN section 14): every GPU-second of capacity lands in
exactly one bucket, on any history."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core.gpu_hours import BUCKETS, USE_BUCKETS, Span, attempt_spans, compute

FLAVORS = ("A100", "H100")


@st.composite
def histories(draw):
    """Random capacity (nodes of two flavors coming and going), use spans (any bucket, possibly more than
    the capacity: the ledger must clip, never break the sum), waiting spans, a window and a step."""
    cap, use, wait = [], [], []
    for n in range(draw(st.integers(1, 4))):
        a = draw(st.floats(0, 50))
        b = draw(st.floats(a, 120))
        cap.append(Span.of(a, b, draw(st.integers(1, 8)), "capacity", flavor=draw(st.sampled_from(FLAVORS)),
                           node=f"n{n}"))
    for j in range(draw(st.integers(0, 12))):
        a = draw(st.floats(0, 100))
        b = draw(st.floats(a, 130))
        use.append(Span.of(a, b, draw(st.integers(1, 6)), draw(st.sampled_from(USE_BUCKETS)),
                           flavor=draw(st.sampled_from(FLAVORS)), queue=draw(st.sampled_from(("q1", "q2"))),
                           team=draw(st.sampled_from(("t1", "t2"))), job=f"j{j}"))
    for _ in range(draw(st.integers(0, 3))):
        a = draw(st.floats(0, 100))
        wait.append(Span.of(a, draw(st.floats(a, 130)), 0, "waiting", flavor=draw(st.sampled_from(FLAVORS + ("",)))))
    since = draw(st.floats(0, 60))
    until = draw(st.floats(since, 140))
    step = draw(st.one_of(st.none(), st.floats(1, 50)))
    return cap, use, wait, since, until, step


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from(("cluster", "flavor", "queue", "team", "job")))
def test_buckets_sum_to_capacity_on_random_histories(h, scope):
    cap, use, wait, since, until, step = h
    res = compute(cap, use, wait, since=since, until=until, scope=scope, step=step)
    for key, tot in res.totals.items():
        assert all(v >= -1e-9 for v in tot.buckets.values())
        assert math.isclose(sum(tot.buckets.values()), tot.capacity, rel_tol=1e-9, abs_tol=1e-6), (key, tot)
        if step is not None:  # the series adds up to the totals, bucket by bucket, and each bin sums too
            bins = res.series[key]
            for b in BUCKETS:
                assert math.isclose(sum(t.buckets[b] for _, t in bins), tot.buckets[b], abs_tol=1e-6)
            for _, t in bins:
                assert math.isclose(sum(t.buckets.values()), t.capacity, abs_tol=1e-6)
    if scope == "cluster" and until > since:  # capacity is exactly the capacity spans inside the window
        want = sum(s.gpus * max(0.0, min(s.end, until) - max(s.start, since)) for s in cap)
        got = res.totals["cluster"].capacity if res.totals else 0.0
        assert math.isclose(got, want, abs_tol=1e-6)


def test_a_worked_example_lands_in_the_right_buckets():
    """8 GPUs for 100 s; a job of 4 GPUs starts at 10 (first progress at 20), checkpoints kept until 60, fails
    at 70 and is detected at 80; another node of 8 GPUs is down for the whole window; a job waits 0-50."""
    cap = [Span.of(0, 100, 8, "capacity", flavor="H100", node="a"), Span.of(0, 100, 8, "capacity", flavor="A100", node="b")]
    use = attempt_spans(start=10, end=80, gpus=4, progress_start=20, kept_until=60, stop_at=70, failed=True,
                        flavor="H100", queue="q", team="t", job="1")
    use.append(Span.of(0, 100, 8, "down", flavor="A100", node="b"))
    wait = [Span.of(0, 50, 0, "waiting", flavor="")]
    tot = compute(cap, use, wait, since=0, until=100).totals["cluster"]
    assert tot.capacity == 1600
    assert tot.buckets == {"down": 800, "useful": 4 * 40, "idle_allocated": 0, "lost_to_failure": 4 * 20,
                           "grace_and_startup": 4 * 10, "held": 0,
                           # free: 8 GPUs 0-10, 4 GPUs 10-80, 8 GPUs 80-100; waiting until 50
                           "free_fragmented": 8 * 10 + 4 * 40, "free": 4 * 30 + 8 * 20}
    assert tot.effective_utilization == pytest.approx(160 / 800)
    by_team = compute(cap, use, wait, since=0, until=100, scope="team").totals["t"]
    assert by_team.capacity == 4 * 70 and by_team.buckets["free"] == 0
    assert by_team.effective_utilization == pytest.approx(160 / 280)


def test_idle_intervals_move_useful_seconds_to_idle_allocated():
    spans = attempt_spans(start=0, end=100, gpus=2, idle=[(30, 50), (90, 200)], job="x")
    tot = compute([], spans, [], since=0, until=100, scope="job").totals["x"]
    assert tot.buckets["useful"] == 2 * 70 and tot.buckets["idle_allocated"] == 2 * 30


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="scope"):
        compute([], [], [], since=0, until=1, scope="node")
    with pytest.raises(ValueError, match="before"):
        compute([], [], [], since=2, until=1)
    with pytest.raises(ValueError, match="bucket"):
        compute([], [Span.of(0, 1, 1, "free")], [], since=0, until=1)
