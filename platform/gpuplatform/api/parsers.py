"""Request body parsers. DRF's JSON parser turns a ValueError into a 400 (ParseError) but lets the
RecursionError of a body nested thousands of levels deep escape as a 500; this one refuses it as malformed,
and passes every parsed body through the input normaliser (gpuplatform/inputs.py `check_value`): a NUL in
a key or string, a non-finite number (`1e999`) or nesting deeper than JSON_MAX_DEPTH is a 400 naming the
field. An integer of any size is left to its field (its own path and bounds); the paths of those beyond
64 bits are kept on the request (`oversized_paths`) for the API's database-overflow backstop. A key given
twice in one object (`{"name": "a", "name": "b"}`: JSON leaves it undefined, Python keeps the last) is a
400 naming the key with its full path (`roles[0].tasks`, `changes[1].kind`). An integer of more digits than
Python converts (sys.get_int_max_str_digits(), 4300) is a 400 on its path too, saying so (new-user trial 12, F2:
the message named no field and told the user to change an interpreter setting). A non-finite number is refused on
its own path (`roles[0].gpus_per_task`: trial 12, F5), and so is a NUL (`roles[1].name`, `command[2]`, `env.A`; a
NUL in a key: the key without it), as the fields' own errors are (new-user trial 13: a NUL anywhere in `roles` was
reported on `roles`). `NaN`, `Infinity` and `-Infinity` (not JSON; DRF's STRICT_JSON refused them with a parse error
naming no field: new-user trial 23) are read as the non-finite numbers they spell, so they are refused on their path
as `1e999` is. Nesting too deep is reported on the request field (its path would be as deep)."""
from __future__ import annotations

import codecs
import json
import sys

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.exceptions import ValidationError

from ..inputs import FINITE_MESSAGE, NUL_MESSAGE, InputError, api_path, check_value, oversized_paths, top_field


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:  # DRF's JSONParser.parse, with the duplicate-key check
            data = _load(codecs.getreader(encoding)(stream), parse_constant=float)
        except _DuplicateKey as exc:
            raise ValidationError({exc.path: ["given twice in one JSON object: send each field once"]}) from None
        except _TooLong as exc:
            raise ValidationError({exc.path or "non_field_errors": [
                f"a number of {exc.number.digits} digits: more than the {exc.number.limit} digits a number may have"]}
            ) from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        view = (parser_context or {}).get("view")
        tolerant = frozenset(getattr(view, "nul_tolerant_fields", {}).get(getattr(view, "action", None), ()))
        try:
            check_value(data, nul_tolerant=tolerant)
        except InputError as exc:
            where = api_path(exc.field) if exc.message in (FINITE_MESSAGE, NUL_MESSAGE) else top_field(exc.field)
            raise ValidationError({where: [exc.message]}) from None
        request = (parser_context or {}).get("request")
        if request is not None:
            request.oversized_paths = oversized_paths(data)
        return data


class _LongInteger:
    """An integer literal longer than int() converts (json.load's parse_int raised ValueError): its digit count."""

    def __init__(self, text: str):
        self.digits = len(text.lstrip("-"))
        self.limit = sys.get_int_max_str_digits()


class _TooLong(ValueError):
    def __init__(self, path: str, number: _LongInteger):
        super().__init__(f"integer too long at {path!r}")
        self.path, self.number = path, number


class _DuplicateKey(ValueError):
    def __init__(self, path: str):
        super().__init__(f"duplicate key {path!r}")
        self.path = path  # the key with its full path: "roles[0].tasks", "changes[1].kind", "name"


def _load(fp, **kwargs):
    """json.load refusing a key given twice in one object: raises _DuplicateKey naming the key with its full
    path. The object_pairs_hook sees objects innermost first and cannot know where they are, so it notes the
    first such object and its key; once parsed, the document is searched for that object (on error only). An
    integer literal longer than int() converts is parsed as a _LongInteger: the first one raises _TooLong with its
    path (searched for on error only, like a duplicate key's)."""
    found: list[tuple[dict, str]] = []
    long: list[_LongInteger] = []

    def parse_int(text: str):
        try:
            return int(text)
        except ValueError:
            long.append(_LongInteger(text))
            return long[-1]

    def unique_keys(pairs: list) -> dict:
        out = dict(pairs)
        if len(out) < len(pairs) and not found:
            seen: set = set()
            key = next(k for k, _ in pairs if k in seen or seen.add(k))
            found.append((out, key))
        return out

    data = json.load(fp, object_pairs_hook=unique_keys, parse_int=parse_int, parse_float=_parse_float, **kwargs)
    if found:
        target, key = found[0]
        where = _path_of(data, target)
        raise _DuplicateKey(f"{where}.{key}" if where else key)
    if long:
        raise _TooLong(_path_of(data, long[0]), long[0])
    return data


WHOLE_FLOAT_AS_INT = 1e16  # from here on str(float) has an exponent ("1e+16"), which DRF's IntegerField cannot read


def _parse_float(text: str):
    """A JSON number with a fraction or an exponent: a float, except a whole one of 1e16 or more (1e300, 2e20), which
    is that integer: `2e0` is 2 for every whole-number field (DRF reads str(2.0)), but DRF read str(1e300) = "1e+300"
    as "A valid integer is required." where the integer literal gets the field's bound ("less than or equal to
    2147483647"): new-user trial 15, F5. A float field takes the integer as the same number."""
    value = float(text)
    if abs(value) >= WHOLE_FLOAT_AS_INT and value.is_integer():
        return int(value)
    return value


def _path_of(value, target) -> str:
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
