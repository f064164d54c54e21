"""The rule tables: shipped YAML (read once, at start: apps.py calls `load_shipped`) + admins' rows.

`rule_set()` -> engine.RuleSet and `health_rules()` -> (version, rules): the shipped table followed by the
enabled DiagnosisRule / HealthRule rows. An admin row that does not parse is skipped alone, with a warning
naming it (the service that saves rows validates them first, so this guards rows written around it, and rows
stored before a stricter check, e.g. regex_safety's: the other admin rows stay in force).

Cached per process (every heartbeat judges its signals: no query and no regex compile each time): the
parsed tables are kept until a rule row is saved or deleted (post_save / post_delete of DiagnosisRule and
HealthRule, whatever wrote it: the services, the admin) or RULES_CACHE_SECONDS (30) passed. A save bumps a
version in the shared cache (Redis when REDIS_URL is set), so every other process reloads at its next call
as well; without a shared cache, or while it is down, the age bound is what makes them reload.
"""
from __future__ import annotations

import logging
import time
import uuid
from functools import lru_cache
from pathlib import Path

import yaml

from . import engine

log = logging.getLogger("gpuplatform.diagnosis")
HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "rules.yaml"
HEALTH_RULES_FILE = HERE / "health_rules.yaml"

__all__ = ["load_shipped", "shipped_rules", "shipped_health_rules", "rule_set", "health_rules", "check_rule",
           "check_health_rule", "invalidate", "connect_invalidation"]

VERSION_KEY = "rule-tables-version"
_memo: dict[str, tuple] = {}  # "diagnosis" | "health" -> (shared version seen, expires at (monotonic), value)


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
    """parse(shipped, the model's enabled rows that parse): a row that does not (a bad pattern, a pattern the
    regex_safety check refuses, a duplicate name) is skipped alone, with a warning naming it; the others stay."""
    kept, ids = [], set()
    for row in model.objects.filter(enabled=True):
        entry = row.as_entry()
        try:
            if entry["id"] in ids:
                raise engine.RuleError("id", f"duplicate id {entry['id']!r}")
            parse(shipped, [entry])
        except engine.RuleError as exc:
            log.warning("admin %s rule %r skipped: %s", what, row.name, exc)
            continue
        kept.append(entry)
        ids.add(entry["id"])
    try:
        return parse(shipped, kept)
    except engine.RuleError as exc:  # each parsed alone: not expected
        log.warning("admin %s rules skipped: %s", what, exc)
        return parse(shipped)


def _shared_version():
    from django.core.cache import cache

    return cache.get(VERSION_KEY)


def _cached(kind: str, load):
    from django.conf import settings

    version, now = _shared_version(), time.monotonic()
    hit = _memo.get(kind)
    if hit is not None and hit[0] == version and hit[1] > now:
        return hit[2]
    value = load()
    _memo[kind] = (version, now + float(getattr(settings, "RULES_CACHE_SECONDS", 30)), value)
    return value


def invalidate(**_signal_kwargs) -> None:
    """Forget the parsed tables here and make every other process reload them (a rule row changed)."""
    from django.core.cache import cache

    _memo.clear()
    cache.set(VERSION_KEY, uuid.uuid4().hex, None)


def connect_invalidation() -> None:
    """Called once at start (apps.py): a saved or deleted rule row invalidates the cached tables."""
    from django.db.models.signals import post_delete, post_save

    from ..models import DiagnosisRule, HealthRule

    for model in (DiagnosisRule, HealthRule):
        post_save.connect(invalidate, sender=model, dispatch_uid=f"rules-invalidate-save-{model.__name__}")
        post_delete.connect(invalidate, sender=model, dispatch_uid=f"rules-invalidate-delete-{model.__name__}")


def rule_set() -> engine.RuleSet:
    from ..models import DiagnosisRule

    return _cached("diagnosis", lambda: _with_admin_rows(engine.parse_rules, shipped_rules(), DiagnosisRule,
                                                         "diagnosis"))


def health_rules() -> tuple[str, tuple]:
    from ..models import HealthRule

    return _cached("health", lambda: _with_admin_rows(engine.parse_health_rules, shipped_health_rules(), HealthRule,
                                                      "health"))


def check_rule(entry: dict) -> None:
    """Raise engine.RuleError when `entry` would not parse after the shipped table."""
    engine.parse_rules(shipped_rules(), [entry])


def check_health_rule(entry: dict) -> None:
    engine.parse_health_rules(shipped_health_rules(), [entry])
