"""Admins' diagnosis and health rules (docs/diagnosis.md). Types and shapes here; the rule itself (category,
action, a compiling pattern, a cited source) is checked by services.save_*_rule with the shipped table's
parser, whose errors come back as a 400 naming the field."""
from rest_framework import serializers

from ...models import DiagnosisRule, HealthRule
from .base import ModelSerializer


class DiagnosisRuleSerializer(ModelSerializer):
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


class HealthRuleSerializer(ModelSerializer):
    value = serializers.JSONField(required=False, allow_null=True, default=None,
                                  help_text="a number (gt, ge, eq), a list of integers (in), unused for any")

    class Meta:
        model = HealthRule
        fields = ["id", "name", "signal", "op", "value", "action", "category", "source", "enabled", "created_at"]
        read_only_fields = ["id", "created_at"]
