"""Request body parsers. DRF's JSON parser turns a ValueError into a 400 (ParseError) but lets the
RecursionError of a body nested thousands of levels deep escape as a 500; this one refuses it as malformed,
and passes every parsed body through the input normaliser (gpuplatform/inputs.py `check_value`): a NUL in
a key or string, a non-finite number (`1e999`) or nesting deeper than JSON_MAX_DEPTH is a 400 naming the
field. An integer of any size is left to its field (its own path and bounds); the paths of those beyond
64 bits are kept on the request (`oversized_paths`) for the API's database-overflow backstop. A key given
twice in one object (`{"name": "a", "name": "b"}`: JSON leaves it undefined, Python keeps the last) is a
400 naming the key with its full path (`roles[0].tasks`, `changes[1].kind`)."""
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
            data = _load(codecs.getreader(encoding)(stream), parse_constant=strict_constant)
        except _DuplicateKey as exc:
            raise ValidationError({exc.path: ["given twice in one JSON object: send each field once"]}) from None
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
    def __init__(self, path: str):
        super().__init__(f"duplicate key {path!r}")
        self.path = path  # the key with its full path: "roles[0].tasks", "changes[1].kind", "name"


def _load(fp, **kwargs):
    """json.load refusing a key given twice in one object: raises _DuplicateKey naming the key with its full
    path. The object_pairs_hook sees objects innermost first and cannot know where they are, so it notes the
    first such object and its key; once parsed, the document is searched for that object (on error only)."""
    found: list[tuple[dict, str]] = []

    def unique_keys(pairs: list) -> dict:
        out = dict(pairs)
        if len(out) < len(pairs) and not found:
            seen: set = set()
            key = next(k for k, _ in pairs if k in seen or seen.add(k))
            found.append((out, key))
        return out

    data = json.load(fp, object_pairs_hook=unique_keys, **kwargs)
    if found:
        target, key = found[0]
        where = _path_of(data, target)
        raise _DuplicateKey(f"{where}.{key}" if where else key)
    return data


def _path_of(value, target: dict) -> str:
    """The path of the object `target` (by identity) inside `value`: "" for the top, "roles[0]", "a.b[2]".
    Iterative: a body nested as deeply as JSON allows must not hit Python's recursion limit here."""
    stack = [(value, "")]
    while stack:
        value, where = stack.pop()
        if value is target:
            return where
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else k) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
    return ""
