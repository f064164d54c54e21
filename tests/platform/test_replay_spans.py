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



def test_a_compression_that_stretches_the_trace_past_the_longest_replay_is_refused():
    """Trial 14: `--compress 0.001` (the least taken) stretched Philly's arrivals over about 100,000 days and the
    replay ran them all; with no --until the horizon must stay within MAX_DAYS. With --until it runs."""
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^the trace philly's arrivals reach day [0-9,]+ from the start once "
                                           r"stretched by --compress 0\.001, past the longest replay \(3,660 days\); "
                                           r"give an --until of at most 3,660 days or a larger --compress$"):
        call_command("replay", "--cluster", "philly", "--trace", "philly", "--compress", "0.001", stdout=out)
    assert out.getvalue() == ""
    call_command("replay", "--cluster", "philly", "--trace", "philly", "--compress", "0.001", "--until", "0.5",
                 "--scale", "0.05", stdout=out)
    assert "simulated span" in out.getvalue()


@pytest.mark.parametrize("args, needle", [
    (["--until", "1e303"], "--until must be at most 3,660 days, got 1e+303"),
    (["--until", "1e304"], "--until must be at most 3,660 days, got 1e+304"),
    (["--until", "1e20"], "--until must be at most 3,660 days, got 1e+20"),
    (["--until", "3660.5"], "--until must be at most 3,660 days, got 3660.5"),
    (["--until=-inf"], "--until must be a finite number above zero, got -inf"),
    (["--start", "1e300"], "--start must be at most 3,660 days, got 1e+300"),
    (["--half-life", "1e300"], "--half-life must be at most 3,660 days, got 1e+300"),
    (["--cycle-interval", "1e300"], "--cycle-interval must be at most 316,224,000 seconds (3660 days), got 1e+300"),
    (["--grace-period", "1e300"], "--grace-period must be at most 316,224,000 seconds"),
    (["--detection-timeout", "1e300"], "--detection-timeout must be at most 316,224,000 seconds"),
    (["--repair-time", "1e300"], "--repair-time must be at most 316,224,000 seconds"),
    (["--checkpoint-interval", "1e300"], "--checkpoint-interval must be at most 316,224,000 seconds"),
    (["--checkpoint-interval", "nan"], "--checkpoint-interval must be a finite number above zero, got nan"),
    (["--checkpoint-cost", "1e300"], "--checkpoint-cost must be at most 316,224,000 seconds"),
    (["--time-limit-factor", "1e300"], "--time-limit-factor must be at most 1,000 times a job's duration"),
    (["--compress", "1e-300"], "--compress must be at least 0.001"),
])
def test_a_span_past_its_bound_is_refused_naming_the_option_and_the_rule(args, needle):
    """New-user trial 14, F1: `--until 1e303` ended in a TypeError traceback, `--until 1e304` in an IndexError,
    and `--until 1e20` printed a 21-digit span and GPU-hour ledger. Every day / second option has an upper bound
    (options.MAX_DAYS, 3660 days) refused before anything is loaded."""
    out = io.StringIO()
    with pytest.raises(CommandError, match="^" + needle.replace("+", r"\+").replace("(", r"\(").replace(")", r"\)")):
        call_command("replay", "--cluster", "philly", "--trace", "philly", *args, stdout=out)
    assert out.getvalue() == ""


def test_an_until_at_its_bound_runs(tmp_path):
    """The bound itself (3660 days) replays: the span is what was asked, the rest only drains."""
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,100,2,200,vc1\n")
    out = io.StringIO()
    call_command("replay", "--cluster", "philly", "--trace", str(trace), "--until", "3660", stdout=out)
    assert "simulated span                  3660.00 days" in out.getvalue()
