"""Request body parsers. DRF's JSON parser turns a ValueError into a 400 (ParseError) but lets the
RecursionError of a body nested thousands of levels deep escape as a 500; this one refuses it as malformed,
and passes every parsed body through the input normaliser (gpuplatform/inputs.py `check_value`): a NUL in
a key or string, a non-finite number (`1e999`) or nesting deeper than JSON_MAX_DEPTH is a 400 naming the
field. An integer of any size is left to its field (its own path and bounds); the paths of those beyond
64 bits are kept on the request (`oversized_paths`) for the API's database-overflow backstop."""
from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.exceptions import ValidationError

from ..inputs import InputError, check_value, oversized_paths, top_field


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
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
