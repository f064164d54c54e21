"""Admins' diagnosis and health rules (models/diagnosis.py): added after the shipped tables
(gpuplatform/diagnosis/rules.yaml, health_rules.yaml) without code. Each is checked by the same parser as
the shipped table before it is saved, and audited."""
from __future__ import annotations

from django.db import transaction

from ..audit import record_event
from ..diagnosis import engine, tables
from ..errors import ValidationError
from ..models import DiagnosisRule, HealthRule
from ..scheduling.locks import lock_name

__all__ = ["save_diagnosis_rule", "save_health_rule"]


def _field(exc: engine.RuleError) -> str:
    return exc.field.split(".", 1)[1] if "." in exc.field else "rule"


def _save(rule, check, *, kind: str, noun: str, summary: str, actor):
    """The shared steps: a non-empty name unique among the model's rows, `check` (the shipped table's
    parser) on the rule, save, and a `kind` Event "<noun> <name> added|changed: <summary>". Holds the name's lock
    (scheduling.locks.lock_name) from the check to the commit: of concurrent saves of one name, the later ones read
    the first's row and get the name's 400, not the unique index's 500 (new-user trial 17b, F14)."""
    if not rule.name:
        raise ValidationError({"name": "name must not be empty"})
    lock_name(noun, rule.name)
    if type(rule).objects.filter(name=rule.name).exclude(pk=rule.pk).exists():
        raise ValidationError({"name": f"a rule named {rule.name!r} exists"})
    try:
        check(rule.as_entry())
    except engine.RuleError as exc:
        raise ValidationError({_field(exc): exc.message}) from None
    created = rule.pk is None
    rule.save()
    record_event(kind, f"{noun} {rule.name} {'added' if created else 'changed'}: {summary}", actor=actor,
                 data=rule.as_entry())
    return rule


@transaction.atomic
def save_diagnosis_rule(rule: DiagnosisRule, *, actor=None) -> DiagnosisRule:
    """Validate and save an admin's diagnosis rule (new or changed). Raises ValidationError naming the
    field: unknown category or action, a pattern that does not compile, neither or both of pattern and
    when, no source, a duplicate name."""
    return _save(rule, tables.check_rule, kind="diagnosis_rule", noun="diagnosis rule",
                 summary=f"{rule.category} ({rule.action})", actor=actor)


@transaction.atomic
def save_health_rule(rule: HealthRule, *, actor=None) -> HealthRule:
    """Validate and save an admin's health rule. Raises ValidationError naming the field."""
    return _save(rule, tables.check_health_rule, kind="health_rule_changed", noun="health rule",
                 summary=f"{rule.signal} {rule.op} {rule.value} -> {rule.action}", actor=actor)
