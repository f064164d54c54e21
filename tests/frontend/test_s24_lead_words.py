"""A pending job's estimated start in words (new-user trial 24, F4): "at the next cycle" only when it is due within
a cycle (NEXT_CYCLE_S), "in about 35 s" under a minute (a job held by its requeue backoff for 35 s more read "at the
next cycle" while cycles ran every second, next to "retries at" that very time), then minutes and hours. The pages'
estimate tag and gpuctl read the one function."""
from datetime import datetime, timedelta, timezone as tz

import pytest

from frontend.templatetags.forecast import estimate_words
from gpuplatform.wording import lead_words

NOW = datetime(2026, 12, 4, 15, 0, tzinfo=tz.utc)


@pytest.mark.parametrize("seconds, words", [
    (-30, "at the next cycle"), (0, "at the next cycle"), (4.9, "at the next cycle"), (5, "in about 5 s"),
    (35, "in about 35 s"), (59.4, "in about 59 s"), (60, "in about 1 m"), (7800, "in about 2 h 10 m"),
])
def test_lead_words(seconds, words):
    assert lead_words(seconds) == words


def test_the_pages_say_the_seconds_of_a_backoff_about_to_end():
    start = NOW + timedelta(seconds=35)
    assert estimate_words(start, NOW + timedelta(minutes=2), "", NOW, NOW) == "in about 35 s (90 %: 2 m)"
    assert estimate_words(NOW + timedelta(seconds=2), None, "", NOW, NOW) == "at the next cycle (90 %: beyond the horizon)"


def test_59_6_seconds_is_a_minute_not_60_s():
    assert lead_words(59.6) == "in about 1 m" and lead_words(59.4) == "in about 59 s"


def test_gpuctl_counts_from_the_clusters_clock_as_the_page_does():
    """New-user re-check 24, R1: gpuctl counted from the forecast's time (estimated_at, a minute old) and showed "in
    about 60 s" while the page, counting from now, went 27 s, 23 s, ...; with the API's X-Cluster-Time both say the
    same, and an estimate the clock has passed by a minute is "overdue" in both."""
    from gpuplatform.cli import _estimate

    job = {"estimated_start": (NOW + timedelta(seconds=60)).isoformat(), "estimated_start_p90": None,
           "estimated_at": NOW.isoformat(), "estimate_note": ""}
    later = NOW + timedelta(seconds=33)
    page = estimate_words(NOW + timedelta(seconds=60), None, "", NOW, later)
    assert page == "in about 27 s (90 %: beyond the horizon)"
    assert _estimate(job, later) == "starts " + page
    assert _estimate(job) == "starts in about 1 m (90 %: beyond the horizon)"  # an older server: the forecast's time
    gone = NOW + timedelta(hours=2)
    assert _estimate(job, gone) == estimate_words(NOW + timedelta(seconds=60), None, "", NOW, gone) \
        == "overdue: was due 1 h 59 m ago (estimate out of date, forecast 2 h ago)"


def test_the_jobs_api_answers_with_the_clusters_clock(client, django_user_model):
    from gpuplatform import clock

    client.force_login(django_user_model.objects.create_user("u", password="pw"))
    for path in ("/api/v1/jobs/", "/api/v1/jobs/999/"):
        r = client.get(path)
        sent = datetime.fromisoformat(r["X-Cluster-Time"])
        assert abs((clock.now() - sent).total_seconds()) < 5, (path, r.status_code)
