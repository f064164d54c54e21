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
