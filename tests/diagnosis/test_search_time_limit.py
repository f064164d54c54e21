"""One diagnosis rule's search of one log line is time-limited (engine.LINE_SEARCH_SECONDS, the `regex` package's
timeout): a pattern that backtracks badly and that regex_safety does not catch (review 11, R1: a cubic chain whose
first repeat sits in a group, `(\\d+\\s*)\\d+\\s*\\d+x`, took 12 s on a 500-character line) cannot stall the
diagnosis of a failed job; it is skipped for the rest of that log and the other rules still decide."""
from __future__ import annotations

import logging
import time

from gpuplatform.diagnosis import engine, tables
from gpuplatform.diagnosis.engine import TaskEvidence, diagnose, parse_rules

# the review's bypass with a character class for its last piece (regex's own optimiser fails `...x` at once on a
# line without an x; here every search of a long line of digits backtracks cubically)
SLOW = r"(\d+\s*)\d+\s*\d+[a-z]"


def _rules():
    extra = [{"id": "admin-slow", "category": "storage", "action": "retry", "source": "an admin's rule",
              "pattern": SLOW}]
    return parse_rules(tables.shipped_rules(), extra)


def test_a_slow_admin_pattern_is_cut_off_and_the_other_rules_decide(caplog):
    rules = _rules()  # accepted at parse time: the check alone does not stop it
    digits = "1" * 2000  # cubic backtracking on a line of digits: minutes without a time limit
    log = "\n".join([digits, digits, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", digits])
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger=engine.__name__):
        result = diagnose([TaskEvidence(task="worker[0]", exit_code=1, log=log)], rules=rules)
    elapsed = time.perf_counter() - t0
    assert result.category == "cuda_oom"  # the shipped rule on line 3 decided
    assert elapsed < 20 * engine.LINE_SEARCH_SECONDS + 1.0, elapsed  # one cut search, not one per line
    warned = [r for r in caplog.records if "admin-slow" in r.getMessage()]
    assert len(warned) == 1 and "line 1" in warned[0].getMessage()


def test_the_time_limit_leaves_ordinary_matches_alone():
    rules = _rules()
    log = "some text 12 34 56x more"  # the pattern matches quickly here
    result = diagnose([TaskEvidence(task="worker[0]", exit_code=1, log=log)], rules=rules)
    assert result.category == "storage" and result.rule == "admin-slow"
