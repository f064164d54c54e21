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
