"""New-user trial 25, B: POST /api/v1/diagnosis-rules/ refused `(?:a|a)*b` ("alternatives that can start with the
same character") but stored `(a|ab)*c` (201), which re.search ran for 30 s on a line of 30,000 a's. re's parser
moves the alternatives' common prefix out (`a(?:|b)`) and merges one-character alternatives into a set, so
regex_safety judged alternatives the admin never wrote; it now reads the pattern with them as written. A POST
missing `source` also names a bad pattern in the same 400, and the per-line time limit cuts off such a search."""
from __future__ import annotations

import logging
import time

import pytest

from gpuplatform.regex_safety import problem

RULE = {"name": "mine", "category": "user_error", "action": "retry", "source": "our runbook"}

REFUSED = [
    r"(a|ab)*c", r"(?:a|ab)*c", r"(a|ab)+c", r"(?:ab|a)+", r"(?:ab|ac)+d", r"(a|[ab])+c", r"(?i)(A|ab)+c",
    r"x(?:yz|y)*w", r"((?:a|ab))*c", r"(?P<x>ab|abc)+d", r"(?>(?:a|ab)+c)",
]

# ordinary patterns: alternatives that start differently, atomic groups, bounded repeats with few ways
ACCEPTED = [
    r"(?:foo|bar)+baz", r"(ab|cd)*e", r"(ab?)+c", r"(?>ab|a)+c", r"(?:x|y|z)+w", r"(?:\s|,)+x", r"(?:\w|-)+=",
    r"(?i)(?:error|warn)(?:ing)?: (?:\w+ )+failed", r"(ERROR|ERR):", r"x(?:a|ab){2}y", r"(?:\d+\.)+\d+",
]


@pytest.mark.parametrize("pattern", REFUSED)
def test_alternatives_that_start_alike_under_a_repeat_are_refused(pattern):
    said = problem(pattern)
    assert said and "alternatives" in said, (pattern, said)


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_ordinary_patterns_are_still_accepted(pattern):
    assert problem(pattern) is None, (pattern, problem(pattern))


def test_the_api_refuses_the_trial_pattern(admin):
    from gpuplatform.models import DiagnosisRule

    r = admin.post("/api/v1/diagnosis-rules/", {**RULE, "pattern": "(a|ab)*c"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["pattern"], r.content
    assert "alternatives that can start with the same character" in r.json()["pattern"][0]
    assert not DiagnosisRule.objects.exists()


def test_a_missing_source_and_a_bad_pattern_are_named_together(admin):
    body = {k: v for k, v in RULE.items() if k != "source"}
    r = admin.post("/api/v1/diagnosis-rules/", {**body, "pattern": "(a|ab)*c"}, format="json")
    assert r.status_code == 400 and set(r.json()) == {"source", "pattern"}, r.content
    assert "alternatives" in r.json()["pattern"][0]
    r = admin.post("/api/v1/diagnosis-rules/", {**body, "pattern": "("}, format="json")
    assert set(r.json()) == {"source", "pattern"} and "not a valid regular expression" in r.json()["pattern"][0]
    r = admin.post("/api/v1/diagnosis-rules/", {**body, "pattern": "(ab|cd)+e"}, format="json")
    assert set(r.json()) == {"source"}, r.content  # a safe pattern: only the missing field
    r = admin.post("/api/v1/diagnosis-rules/", {**RULE, "pattern": "(ab|cd)+e"}, format="json")
    assert r.status_code == 201, r.content
    r = admin.patch(f"/api/v1/diagnosis-rules/{r.json()['id']}/", {"pattern": "(ab|a)+e", "category": "nope"},
                    format="json")
    assert r.status_code == 400 and "alternatives" in r.json()["pattern"][0], r.content


def test_the_line_time_limit_bounds_a_quadratic_search_that_passes_the_check(caplog):
    """`(?:ab?)*c` passes the check (its repetitions split a text one way) yet re.search is quadratic on a long
    line of a's: the admin's rule is searched with LINE_SEARCH_SECONDS per line and the shipped rules decide."""
    from gpuplatform.diagnosis import engine, tables
    from gpuplatform.diagnosis.engine import TaskEvidence, diagnose, parse_rules

    rules = parse_rules(tables.shipped_rules(), [{"id": "admin-quad", "category": "storage", "action": "retry",
                                                  "source": "s", "pattern": r"(?:ab?)*c\d"}])
    line = "a" * 30000 + "c"
    log = "\n".join([line, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", line])
    started = time.process_time()
    with caplog.at_level(logging.WARNING, logger=engine.__name__):
        result = diagnose([TaskEvidence(task="worker[0]", exit_code=1, log=log)], rules=rules)
    assert time.process_time() - started < engine.RULE_LOG_SECONDS + 0.5
    assert result.category == "cuda_oom"
    assert any("admin-quad" in r.getMessage() for r in caplog.records)
