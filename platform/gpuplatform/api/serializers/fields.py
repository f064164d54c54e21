"""Field helpers shared by the serializers: bounded integers (the database's 32-bit columns must never
see an overflow, which would be a 500, not a 400)."""
import math

from rest_framework import serializers

INT32_MAX = 2**31 - 1


def count_field(**kwargs) -> serializers.IntegerField:
    """A whole number of GPUs / tasks / millicores / MiB / seconds; range rules are the services'."""
    kwargs.setdefault("min_value", -INT32_MAX)
    kwargs.setdefault("max_value", INT32_MAX)
    return serializers.IntegerField(**kwargs)


class FiniteFloatField(serializers.FloatField):
    """A real number that is finite: 'nan' / 'inf' (form-encoded bodies, query strings) are refused with
    the field's 'invalid' message instead of reaching the database and the fair-share order."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


def make_strings_strict() -> None:
    """Strings must be strings: DRF's CharField (and its subclasses: slug, regex, e-mail, URL, IP fields)
    turns a JSON number into text (`{"reason": 5}` -> "5"); from here on it refuses anything but a string
    with the field's 'invalid' message ("Not a valid string."), like null and objects already were.
    Called once from the app's ready(); idempotent. Form-encoded bodies and query strings are text anyway."""
    if getattr(serializers.CharField.to_internal_value, "strict_strings", False):
        return
    lenient = serializers.CharField.to_internal_value

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return lenient(self, data)

    to_internal_value.strict_strings = True
    serializers.CharField.to_internal_value = to_internal_value
