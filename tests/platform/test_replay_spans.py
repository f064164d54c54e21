"""`manage.py replay` refuses a span that is not a finite positive number (new-user trial 8, F11: `--until -1`
printed a full report of nothing, "simulated span 0.00 days", rc 0; --scale 0 and --compress -1 were
already refused)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize("args, needle", [
    (["--until", "-1"], "--until must be a finite number above zero, got -1"),
    (["--until", "0"], "--until must be a finite number above zero, got 0"),
    (["--until", "nan"], "--until must be a finite number above zero, got nan"),
    (["--until", "inf"], "--until must be a finite number above zero, got inf"),
    (["--start", "-2"], "--start must be a finite number zero or more, got -2"),
    (["--cycle-interval", "0"], "--cycle-interval must be a finite number above zero, got 0"),
    (["--grace-period", "-30"], "--grace-period must be a finite number zero or more, got -30"),
    (["--half-life", "-1"], "--half-life must be a finite number zero or more, got -1"),
])
def test_a_negative_or_zero_span_is_refused_naming_the_option(args, needle):
    out = io.StringIO()
    with pytest.raises(CommandError, match=needle.replace("+", r"\+")):
        call_command("replay", "--cluster", "philly", "--trace", "philly", *args, stdout=out)
    assert out.getvalue() == ""  # refused before anything is loaded or replayed


def test_a_compression_that_leaves_nothing_past_the_default_start_names_compress():
    """F13: `--compress 1e9` said "--start 20: ..." though no --start was given."""
    with pytest.raises(CommandError, match=r"^--compress 1e\+09: the trace philly's arrivals span days 0\.0 to 0\.0 "
                                           r"once compressed, all before its default start \(day 20\)"):
        call_command("replay", "--cluster", "philly", "--trace", "philly", "--compress", "1e9", stdout=io.StringIO())

