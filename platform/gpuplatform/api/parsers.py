"""Request body parsers. DRF's JSON parser turns a ValueError into a 400 (ParseError) but lets the
RecursionError of a body nested thousands of levels deep escape as a 500; this one refuses it as malformed,
and passes every parsed body through the input normaliser (gpuplatform/inputs.py `check_value`): a NUL in
a key or string, a non-finite number (`1e999`) or nesting deeper than JSON_MAX_DEPTH is a 400 naming the
field. An integer of any size is left to its field (its own path and bounds); the paths of those beyond
64 bits are kept on the request (`oversized_paths`) for the API's database-overflow backstop. A key given
twice in one object (`{"name": "a", "name": "b"}`: JSON leaves it undefined, Python keeps the last) is a
400 naming the key."""
from __future__ import annotations

import codecs
import json

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.exceptions import ValidationError
from rest_framework.utils.json import strict_constant  # NaN / Infinity are not JSON (DRF's STRICT_JSON)

from ..inputs import InputError, check_value, oversized_paths, top_field


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:  # DRF's JSONParser.parse, with the duplicate-key check
            data = json.load(codecs.getreader(encoding)(stream), object_pairs_hook=_unique_keys,
                             parse_constant=strict_constant)
        except _DuplicateKey as exc:
            raise ValidationError({exc.key: ["given twice in one JSON object: send each field once"]}) from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        view = (parser_context or {}).get("view")
        tolerant = frozenset(getattr(view, "nul_tolerant_fields", {}).get(getattr(view, "action", None), ()))
        try:
            check_value(data, nul_tolerant=tolerant)
        except InputError as exc:
            raise ValidationError({top_field(exc.field): [exc.message]}) from None
        request = (parser_context or {}).get("request")
        if request is not None:
            request.oversized_paths = oversized_paths(data)
        return data


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _unique_keys(pairs: list) -> dict:
    """json's object_pairs_hook: the object, or _DuplicateKey naming the first key given twice."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out
