"""Admins' diagnosis and health rules (models/diagnosis.py): added after the shipped tables
(gpuplatform/diagnosis/rules.yaml, health_rules.yaml) without code. Each is checked by the same parser as
the shipped table before it is saved, and audited."""
from __future__ import annotations

from django.db import transaction

from ..audit import record_event
from ..diagnosis import engine, tables
from ..errors import ValidationError
from ..models import DiagnosisRule, HealthRule
from ..models.tenancy import canonical_key, name_meant
from ..scheduling.locks import lock_name

__all__ = ["save_diagnosis_rule", "save_health_rule", "rule_named", "rule_name_taken", "RULE_NAME_RULE",
           "diagnosis_rule_problems"]

# The queue and team names' rule (models.tenancy.canonical_key; services.queues.QUEUE_NAME_RULE), in its words:
# `hot` and `HOT` were two health rules (admin report, session 27), read as one on every page and Event.
RULE_NAME_RULE = ("{noun} names that differ only in letter case or in the separators '.', '_' and '-' name the same "
                  "rule (xid-hot, xid_hot, XID.Hot and xidhot are one)")
NO_PATTERN = ("give a pattern (a regular expression searched in each log line) or `when` ({\"exit_code\": [126, 127]} "
              "or {\"signal\": 9}): a rule has exactly one of them")
BOTH_GIVEN = "a rule has exactly one of `pattern` and `when`: leave out one of them"


def rule_named(model, name, *, exclude=None) -> str | None:
    """The name of the `model` rule (other than pk `exclude`) that `name` means by RULE_NAME_RULE, or None: the one
    of that exact name, else the first by id whose canonical key is `name`'s (models.tenancy.name_meant)."""
    return name_meant(model.objects.exclude(pk=exclude) if exclude is not None else model.objects.all(), name)


def rule_name_taken(noun: str, holder: str) -> str:
    """The one wording of a rule name that clashes with rule `holder` (the API and the service alike)."""
    return f"a {noun} named {holder!r} already exists: {RULE_NAME_RULE.format(noun=noun)}"


def diagnosis_rule_problems(pattern, when) -> dict[str, str]:
    """The field a diagnosis rule's pattern/when pair is wrong on ({} when exactly one is given): neither is a
    `pattern` error (an empty pattern), both a `when` one (the alternative to a pattern). docs/api.md: a field's
    error is under the field, never under a name the request does not have (it read {"rule": [...]})."""
    if bool(pattern) == bool(when):
        return {"when": BOTH_GIVEN} if pattern else {"pattern": NO_PATTERN}
    return {}


def _field(exc: engine.RuleError) -> str:
    return exc.field.split(".", 1)[1] if "." in exc.field else "__all__"


def _save(rule, check, *, kind: str, noun: str, summary: str, actor, problems: dict | None = None):
    """The shared steps: a non-empty name unique among the model's rows by RULE_NAME_RULE, `problems` (every bad
    field at once) or else `check` (the shipped table's parser) on the rule, save, and a `kind` Event "<noun> <name>
    added|changed: <summary>". Holds the name's lock (scheduling.locks.lock_name, on its canonical key: `hot` and
    `HOT` wait for each other) from the check to the commit: of concurrent saves of one name, the later ones read
    the first's row and get the name's 400, not the unique index's 500 (new-user trial 17b, F14)."""
    errors = dict(problems or {})
    if not rule.name:
        errors = {"name": "name must not be empty", **errors}
    else:
        lock_name(noun, canonical_key(rule.name) or rule.name)
        holder = rule_named(type(rule), rule.name, exclude=rule.pk)
        if holder is not None:
            errors = {"name": rule_name_taken(noun, holder), **errors}
    try:
        check(rule.as_entry())
    except engine.RuleError as exc:
        key = _field(exc)
        if key != "__all__" or not errors:  # (the pattern/when pair's own words are in `problems`)
            errors.setdefault(key, exc.message)
    if errors:
        raise ValidationError(errors)
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
                 summary=f"{rule.category} ({rule.action})", actor=actor,
                 problems=diagnosis_rule_problems(rule.pattern, rule.when))


@transaction.atomic
def save_health_rule(rule: HealthRule, *, actor=None) -> HealthRule:
    """Validate and save an admin's health rule. Raises ValidationError naming every bad field at once
    (engine.health_rule_problems: signal, op, action, category, value; and the name)."""
    return _save(rule, tables.check_health_rule, kind="health_rule_changed", noun="health rule",
                 summary=f"{rule.signal} {rule.op} {rule.value} -> {rule.action}", actor=actor,
                 problems=engine.health_rule_problems(rule.as_entry()))
