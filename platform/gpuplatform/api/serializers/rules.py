"""Admins' diagnosis and health rules (docs/diagnosis.md). Types and shapes here, with every bad field of a
request named at once: the fields' own checks, the name (unique by services.rules.RULE_NAME_RULE, in its words),
and the checks between fields (a health rule's signal, op, action, category and value:
engine.health_rule_problems; a diagnosis rule's pattern or when). services.save_*_rule checks the whole rule again
with the shipped table's parser, whose errors come back as a 400 naming the field."""
from collections.abc import Mapping

from rest_framework import serializers
from rest_framework.fields import empty

from ...diagnosis import engine
from ...models import DiagnosisRule, HealthRule
from ...services import rules as rule_service
from .base import ModelSerializer


class _RuleSerializer(ModelSerializer):
    """The shared part: `name` without Django's unique validator ("... with this name already exists.", and `hot`
    beside `HOT`), checked by the service's rule and words instead; and `cross_problems`, the checks between
    fields, reported beside the fields' own errors (new-user trial 25, B; admin report, session 27: a body with a
    bad `signal` and a bad `category` named only `signal`)."""

    name = serializers.CharField(max_length=100)
    noun = ""

    def validate_name(self, value: str) -> str:
        holder = rule_service.rule_named(self.Meta.model, value,
                                         exclude=self.instance.pk if self.instance is not None else None)
        if holder is not None:
            raise serializers.ValidationError(rule_service.rule_name_taken(self.noun, holder))
        return value

    def _effective(self, data, name):
        """(known, value) of field `name` for this request: as its field reads it from `data`, else the rule's
        (a PATCH), else the field's default. known is False when the field is missing or itself refused (its own
        error says so; the checks between fields leave it out)."""
        field = self.fields[name]
        raw = field.get_value(data)
        if raw is empty:
            if self.instance is not None and self.partial:
                return True, getattr(self.instance, name)
            if field.required:
                return False, None
            try:
                return True, field.get_default()
            except serializers.SkipField:
                return True, None
        try:
            return True, field.run_validation(raw)
        except serializers.ValidationError:
            return False, None

    def cross_problems(self, data) -> dict[str, str]:
        return {}

    def to_internal_value(self, data):
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(exc.detail, dict) or not isinstance(data, Mapping):
                raise
            errors = dict(exc.detail)
            for key, message in self.cross_problems(data).items():
                errors.setdefault(key, [message])
            raise serializers.ValidationError(errors) from None
        problems = self.cross_problems(data)
        if problems:
            raise serializers.ValidationError({k: [v] for k, v in problems.items()})
        return attrs


class DiagnosisRuleSerializer(_RuleSerializer):
    pattern = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True,
                                    help_text="a Python regular expression searched in each log line")
    when = serializers.JSONField(required=False, allow_null=True, default=None,
                                 help_text='instead of a pattern: {"exit_code": [126, 127]} or {"signal": 9}')
    xids = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=100000), required=False,
                                 allow_null=True, default=None, max_length=256,
                                 help_text="with a (?P<xid>...) group in the pattern: only these XID numbers")

    class Meta:
        model = DiagnosisRule
        fields = ["id", "name", "category", "action", "pattern", "ignore_case", "xids", "when", "source", "enabled",
                  "created_at"]
        read_only_fields = ["id", "created_at"]

    noun = "diagnosis rule"

    def cross_problems(self, data) -> dict[str, str]:
        """An empty pattern without `when` is a 400 on `pattern`; both given, on `when`
        (services.rules.diagnosis_rule_problems); it read {"rule": [...]}, a key the request does not have."""
        (known_p, pattern), (known_w, when) = self._effective(data, "pattern"), self._effective(data, "when")
        if not (known_p and known_w):
            return {}
        return rule_service.diagnosis_rule_problems(pattern, when)

    def validate_pattern(self, value: str) -> str:
        """regex_safety's judgement of the pattern, here with the other fields' checks, so one 400 names a bad
        pattern beside a missing `source` (new-user trial 25, B: only {"source": ["This field is required."]} came
        back). ignore_case changes nothing there (the judgement counts a letter's other case always); the service
        checks the whole rule again (tables.check_rule)."""
        import warnings

        from ... import regex_safety

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # an ambiguous set: the service's check names it
            unsafe = regex_safety.problem(value) if value else None
        if unsafe:
            raise serializers.ValidationError(unsafe)
        return value


class HealthRuleSerializer(_RuleSerializer):
    value = serializers.JSONField(required=False, allow_null=True, default=None,
                                  help_text="a number, not true/false (gt, ge; 0 or more: every signal is a count, "
                                            "a duration or an XID number), a non-empty list of whole numbers (in), "
                                            "unused for any")

    class Meta:
        model = HealthRule
        fields = ["id", "name", "signal", "op", "value", "action", "category", "source", "enabled", "created_at"]
        read_only_fields = ["id", "created_at"]

    noun = "health rule"

    def cross_problems(self, data) -> dict[str, str]:
        """engine.health_rule_problems on the fields this request gives or keeps, each reported on a field that
        has no error of its own: all of signal, op, action, category and value at once."""
        entry, known = {}, set()
        for name in ("signal", "op", "value", "action", "category"):
            ok, value = self._effective(data, name)
            if ok:
                entry[name] = value
                known.add(name)
        problems = engine.health_rule_problems(entry)
        # value is judged by op (and signal): when op is unknown (missing, refused), value waits for it
        return {k: v for k, v in problems.items() if k in known and (k != "value" or "op" in known)}
