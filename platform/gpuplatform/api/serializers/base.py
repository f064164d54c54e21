"""The base of every API serializer: a body field the serializer does not know is refused, never dropped.

`StrictFieldsMixin.to_internal_value` compares the keys of the incoming mapping with the serializer's
writable fields (plus `ignored_fields`, keys a client may send that the API knows and deliberately does not
store, and `extra_fields`, keys the endpoint checks itself outside the serializer) and raises a ValidationError
naming each unknown key and listing those accepted. A nested serializer (a role inside a job, a GPU inside a node
report) is a serializer too, so the rule holds at every level; the error path then names the nesting, e.g.
`roles[0].gpu` (see api/exceptions.py for the one error shape).

Every serializer under api/serializers/ derives from `Serializer` or `ModelSerializer` below;
tests/api/test_error_shape.py fails if one does not.
"""
from __future__ import annotations

from collections.abc import Mapping

from rest_framework import serializers

# Form posts from the browsable API carry these; they are not body fields.
_TRANSPORT_KEYS = frozenset({"csrfmiddlewaretoken"})
NEEDS_JSON = ("{what} cannot be sent form-encoded: send the request as JSON (Content-Type: application/json), "
              "e.g. {example}")


def _form_errors(serializer, data) -> dict:
    """For a form-encoded (or multipart) body, a QueryDict: the fields it cannot carry, each with the rule. A
    list of objects (a job's `roles`, `subgroups`, a what-if's `changes`) has no form encoding here, and a JSON
    field (`command`, `env`) is JSON text there: without this a form-encoded job with roles was answered
    "roles: This field is required." and "command: Value must be valid JSON." (new-user trial 10, F23)."""
    import json

    from django.http import QueryDict

    if not isinstance(data, QueryDict):
        return {}
    errors = {}
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        given = name in data or any(k.startswith((f"{name}[", f"{name}.")) for k in data)
        # nested objects only: a list of plain values (`nodes=a&nodes=b`) has a form encoding DRF reads
        if isinstance(field, serializers.BaseSerializer) or (isinstance(field, serializers.ListField) and isinstance(
                field.child, (serializers.BaseSerializer, serializers.DictField, serializers.JSONField))):
            if given or (field.required and not getattr(serializer.root, "partial", False)):
                many = isinstance(field, (serializers.ListSerializer, serializers.ListField))
                errors[name] = [NEEDS_JSON.format(what=f"{name} (a list of objects)" if many else f"{name} (an object)",
                                                  example=('{"%s": [{...}]}' if many else '{"%s": {...}}') % name)]
        elif isinstance(field, serializers.JSONField) and name in data:
            try:
                json.loads(data[name])
            except ValueError:
                errors[name] = [f"in a form-encoded request {name} is JSON text (e.g. [\"sleep\", \"60\"] or "
                                f"\"sleep 60\" with the quotes); or send the request as JSON "
                                f"(Content-Type: application/json)"]
    return errors


GIVEN_TWICE = "given more than once: send it once"


def _repeated_form_keys(serializer, data) -> dict:
    """For a form-encoded (or multipart) body: each key given more than once (`username=a&username=b`) whose
    field takes one value, with the rule. DRF reads the last silently, so a proxy or log reading the first saw
    another request than the one served (new-user trial 13, F3); a JSON body's repeated key is refused by the
    parser (api/parsers.py). A list of plain values (`nodes=a&nodes=b`) is how a form sends a list: kept."""
    from django.http import QueryDict

    if not isinstance(data, QueryDict):
        return {}
    errors = {}
    for key, values in data.lists():
        field = serializer.fields.get(key)
        many = isinstance(field, (serializers.ListField, serializers.MultipleChoiceField,
                                  serializers.ManyRelatedField, serializers.ListSerializer))
        if len(values) > 1 and not many and key not in _TRANSPORT_KEYS:
            errors[key] = [GIVEN_TWICE]
    return errors


class StrictFieldsMixin:
    """Refuse unknown keys with 400 ({"<key>": ["unknown field; accepted fields: ..."]}). Read-only fields count
    as unknown in a request body (they are set by the server). In a form-encoded body a key given more than once
    is refused too ({"<key>": ["given more than once: send it once"]}), as a JSON body's is by the parser.

    The accepted fields the message lists are exactly the keys let through: the writable fields, then
    `ignored_fields` (known, deliberately not stored), then `extra_fields` (keys the endpoint takes and checks
    itself, outside this serializer: a federation manager's `clusters`, `cluster_selector`, ... on a job,
    federation.api.FederatedSubmitSerializer). A serializer extended with keys of its own names them in one of
    the two, so the list never leaves out a field the endpoint takes (new-user trial 27)."""

    ignored_fields: tuple[str, ...] = ()
    extra_fields: tuple[str, ...] = ()

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            form = _form_errors(self, data)
            if form:
                raise serializers.ValidationError(form)
            writable = [name for name, f in self.fields.items() if not f.read_only]
            listed = list(dict.fromkeys([*writable, *self.ignored_fields, *self.extra_fields]))
            allowed = set(listed) | _TRANSPORT_KEYS
            unknown = sorted(str(k) for k in data.keys() if k not in allowed)
            if unknown:
                accepted = ", ".join(listed) or "none"
                raise serializers.ValidationError(
                    {key: [f"unknown field (not dropped: the request is refused); accepted fields: {accepted}"]
                     for key in unknown})
            repeated = _repeated_form_keys(self, data)
            if repeated:
                raise serializers.ValidationError(repeated)
        return super().to_internal_value(data)


class Serializer(StrictFieldsMixin, serializers.Serializer):
    """A plain serializer that refuses unknown fields."""


class ModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    """A model serializer that refuses unknown fields."""
