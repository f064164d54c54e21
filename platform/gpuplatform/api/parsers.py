"""Request body parsers. DRF's JSON parser turns a ValueError into a 400 (ParseError) but lets the
RecursionError of a body nested thousands of levels deep escape as a 500; this one refuses it as malformed."""
from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
