"""An admin's diagnosis rule is searched with time limits (engine.LINE_SEARCH_SECONDS per line, RULE_LOG_SECONDS per
task's log: the `regex` package's timeout): a pattern that backtracks badly and that regex_safety does not catch
(review 11, R1: a cubic chain whose first repeat sits in a group, `(\\d+\\s*)\\d+\\s*\\d+x`, took 12 s on a
500-character line with Python's re) cannot stall the diagnosis of a failed job. The shipped rules stay on Python's
re, unlimited (review 11, S1: regex runs one of them quadratically), and a pattern the two engines read differently
is refused (S3)."""
from __future__ import annotations

import logging
import re
import time

import pytest

from gpuplatform.diagnosis import engine, tables
from gpuplatform.diagnosis.engine import RuleError, TaskEvidence, diagnose, parse_rules

# the review's bypass with a character class for its last piece (regex's own optimiser fails `...x` at once on a line
# without an x; here every search of a long line of digits backtracks cubically)
SLOW = r"(\d+\s*)\d+\s*\d+[a-z]"


def _rules(pattern: str = SLOW):
    extra = [{"id": "admin-slow", "category": "storage", "action": "retry", "source": "an admin's rule",
              "pattern": pattern}]
    return parse_rules(tables.shipped_rules(), extra)


def _diagnose(log: str, rules):
    return diagnose([TaskEvidence(task="worker[0]", exit_code=1, log=log)], rules=rules)


def test_a_slow_admin_pattern_is_cut_off_and_the_other_rules_decide(caplog):
    rules = _rules()  # accepted at parse time: the check alone does not stop it
    digits = "1" * 2000  # cubic backtracking on a line of digits: minutes without a time limit
    log = "\n".join([digits, digits, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", digits])
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger=engine.__name__):
        result = _diagnose(log, rules)
    elapsed = time.perf_counter() - t0
    assert result.category == "cuda_oom"  # the shipped rule on line 3 decided
    assert elapsed < engine.RULE_LOG_SECONDS + 1.0, elapsed
    warned = [r.getMessage() for r in caplog.records if "admin-slow" in r.getMessage()]
    assert len(warned) == 1 and "line 1 " in warned[0], warned  # said once, not once per line


def test_one_log_costs_an_admin_rule_at_most_its_budget(caplog):
    """S2: searches just under the per-line limit on every line add up; the rule's budget for the log ends them."""
    rules = _rules()
    log = "\n".join(["1" * 200] * 400 + ["ValueError: bad config"])  # ~30 ms a line with re: 12 s in all
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger=engine.__name__):
        result = _diagnose(log, rules)
    assert time.perf_counter() - t0 < engine.RULE_LOG_SECONDS + 1.5
    assert result.category == "user_error"
    assert any("skipped for the rest" in r.getMessage() for r in caplog.records)


def test_the_shipped_rules_run_on_re_without_a_limit():
    """S1: a 64 KiB line of "[x] " then a Python exception: the shipped rule still finds the exception."""
    rules = _rules()
    shipped = [r for r in rules.line_rules if not r.limited]
    assert shipped and all(isinstance(r.pattern, re.Pattern) for r in shipped)
    assert [r.id for r in rules.line_rules if r.limited] == ["admin-slow"]
    result = _diagnose("[x] " * 16384 + "\nValueError: bad config", rules)
    assert result.category == "user_error"


def test_a_pattern_the_two_engines_read_differently_is_refused():
    """S3: `[[:digit:]]` is a set of characters to re (which regex_safety judges) and a POSIX class to regex (which
    runs admins' rules): refused naming the pattern, every time (not only on re's first, uncached compile)."""
    for _ in range(2):
        with pytest.raises(RuleError) as err:
            _rules(r"[[:digit:]]+[[:digit:]]+[[:digit:]]+x")
        assert err.value.field == "extra[0].pattern" and "ambiguous" in err.value.message


def test_the_time_limit_leaves_ordinary_matches_alone():
    result = _diagnose("some text 12 34 56x more", _rules())  # the pattern matches quickly here
    assert result.category == "storage" and result.rule == "admin-slow"
