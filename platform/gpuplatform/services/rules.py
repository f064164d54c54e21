"""Admins' diagnosis and health rules (models/diagnosis.py): added after the shipped tables
(gpuplatform/diagnosis/rules.yaml, health_rules.yaml) without code. Each is checked by the same parser as
the shipped table before it is saved, and audited."""
from __future__ import annotations

from django.db import transaction

from ..audit import record_event
from ..diagnosis import engine, tables
from ..errors import ValidationError
from ..models import DiagnosisRule, HealthRule

__all__ = ["save_diagnosis_rule", "save_health_rule"]


def _field(exc: engine.RuleError) -> str:
    return exc.field.split(".", 1)[1] if "." in exc.field else "rule"


@transaction.atomic
def save_diagnosis_rule(rule: DiagnosisRule, *, actor=None) -> DiagnosisRule:
    """Validate and save an admin's diagnosis rule (new or changed). Raises ValidationError naming the
    field: unknown category or action, a pattern that does not compile, neither or both of pattern and
    when, no source, a duplicate name."""
    if not rule.name:
        raise ValidationError({"name": "name must not be empty"})
    if DiagnosisRule.objects.filter(name=rule.name).exclude(pk=rule.pk).exists():
        raise ValidationError({"name": f"a rule named {rule.name!r} exists"})
    try:
        tables.check_rule(rule.as_entry())
    except engine.RuleError as exc:
        raise ValidationError({_field(exc): exc.message}) from None
    created = rule.pk is None
    rule.save()
    record_event("diagnosis_rule", f"diagnosis rule {rule.name} {'added' if created else 'changed'}: "
                                   f"{rule.category} ({rule.action})", actor=actor, data=rule.as_entry())
    return rule


@transaction.atomic
def save_health_rule(rule: HealthRule, *, actor=None) -> HealthRule:
    """Validate and save an admin's health rule. Raises ValidationError naming the field."""
    if not rule.name:
        raise ValidationError({"name": "name must not be empty"})
    if HealthRule.objects.filter(name=rule.name).exclude(pk=rule.pk).exists():
        raise ValidationError({"name": f"a rule named {rule.name!r} exists"})
    try:
        tables.check_health_rule(rule.as_entry())
    except engine.RuleError as exc:
        raise ValidationError({_field(exc): exc.message}) from None
    created = rule.pk is None
    rule.save()
    record_event("health_rule_changed", f"health rule {rule.name} {'added' if created else 'changed'}: "
                                        f"{rule.signal} {rule.op} {rule.value} -> {rule.action}", actor=actor,
                 data=rule.as_entry())
    return rule
