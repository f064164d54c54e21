"""The rule tables: shipped YAML (read once, at start: apps.py calls `load_shipped`) + admins' rows.

`rule_set()` -> engine.RuleSet and `health_rules()` -> (version, rules): the shipped table followed by the
enabled DiagnosisRule / HealthRule rows (read on every call: one small query, so an admin's new rule acts
on the next failure without a restart). An admin row that does not parse is skipped with a warning (the
service that saves rows validates them first, so this only guards rows written around it).
"""
from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

import yaml

from . import engine

log = logging.getLogger("gpuplatform.diagnosis")
HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "rules.yaml"
HEALTH_RULES_FILE = HERE / "health_rules.yaml"

__all__ = ["load_shipped", "shipped_rules", "shipped_health_rules", "rule_set", "health_rules", "check_rule",
           "check_health_rule"]


@lru_cache(maxsize=1)
def shipped_rules() -> dict:
    return yaml.safe_load(RULES_FILE.read_text())


@lru_cache(maxsize=1)
def shipped_health_rules() -> dict:
    return yaml.safe_load(HEALTH_RULES_FILE.read_text())


def load_shipped() -> None:
    """Read and check both shipped tables (raises engine.RuleError on a bad shipped rule)."""
    engine.parse_rules(shipped_rules())
    engine.parse_health_rules(shipped_health_rules())


def _with_admin_rows(parse, shipped: dict, model, what: str):
    """parse(shipped, the model's enabled rows), or parse(shipped) alone when a row does not parse."""
    rows = [r.as_entry() for r in model.objects.filter(enabled=True)]
    try:
        return parse(shipped, rows)
    except engine.RuleError as exc:
        log.warning("admin %s rules skipped: %s", what, exc)
        return parse(shipped)


def rule_set() -> engine.RuleSet:
    from ..models import DiagnosisRule

    return _with_admin_rows(engine.parse_rules, shipped_rules(), DiagnosisRule, "diagnosis")


def health_rules() -> tuple[str, tuple]:
    from ..models import HealthRule

    return _with_admin_rows(engine.parse_health_rules, shipped_health_rules(), HealthRule, "health")


def check_rule(entry: dict) -> None:
    """Raise engine.RuleError when `entry` would not parse after the shipped table."""
    engine.parse_rules(shipped_rules(), [entry])


def check_health_rule(entry: dict) -> None:
    engine.parse_health_rules(shipped_health_rules(), [entry])
