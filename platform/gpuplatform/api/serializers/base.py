"""The base of every API serializer: a body field the serializer does not know is refused, never dropped.

`StrictFieldsMixin.to_internal_value` compares the keys of the incoming mapping with the serializer's
writable fields (plus `ignored_fields`, keys a client may send that the API knows and deliberately does not
store) and raises a ValidationError naming each unknown key. A nested serializer (a role inside a job, a GPU
inside a node report) is a serializer too, so the rule holds at every level; the error path then names the
nesting, e.g. `roles[0].gpu` (see api/exceptions.py for the one error shape).

Every serializer under api/serializers/ derives from `Serializer` or `ModelSerializer` below;
tests/api/test_error_shape.py fails if one does not.
"""
from __future__ import annotations

from collections.abc import Mapping

from rest_framework import serializers

# Form posts from the browsable API carry these; they are not body fields.
_TRANSPORT_KEYS = frozenset({"csrfmiddlewaretoken"})


class StrictFieldsMixin:
    """Refuse unknown keys with 400 ({"<key>": ["unknown field; accepted: ..."]}). Read-only fields count as
    unknown in a request body (they are set by the server)."""

    ignored_fields: tuple[str, ...] = ()

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            writable = [name for name, f in self.fields.items() if not f.read_only]
            allowed = set(writable) | set(self.ignored_fields) | _TRANSPORT_KEYS
            unknown = sorted(str(k) for k in data.keys() if k not in allowed)
            if unknown:
                accepted = ", ".join(writable) or "none"
                raise serializers.ValidationError(
                    {key: [f"unknown field (not dropped: the request is refused); accepted fields: {accepted}"]
                     for key in unknown})
        return super().to_internal_value(data)


class Serializer(StrictFieldsMixin, serializers.Serializer):
    """A plain serializer that refuses unknown fields."""


class ModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    """A model serializer that refuses unknown fields."""
