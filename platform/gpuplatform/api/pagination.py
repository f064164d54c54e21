"""Keyset (cursor) pagination for lists that grow while they are read (jobs, events).

Offset pages shift under inserts: with newest-first order, a job submitted between two page reads pushes
the old rows down and the next offset page repeats one and skips another. A keyset page instead continues
strictly after the last row the client saw: the `next` link carries an opaque cursor holding that row's
values of the ordering columns, always ending in the primary key, so the order is total and stable and
every row is listed exactly once however many rows are inserted meanwhile (new rows that sort before the
cursor appear on no later page).

Query parameters: `limit` (1-500, default PAGE_SIZE), `ordering` (one of the view's `ordering_fields`,
`-` for descending; default the view's `keyset_ordering`), `cursor` (from a `next` / `previous` link).
Response: {"count": rows matching the filters, "next": URL | null, "previous": URL | null, "results": [...]}.
A malformed or foreign cursor is a 400 naming `cursor`. Every one of them sent empty is a 400 naming it
(inputs.EMPTY_MESSAGE: refused before any view), never its default; a number is ASCII digits (inputs.parse_whole).
"""
from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils.urls import remove_query_param, replace_query_param

from ..inputs import InputError, parse_whole
from ..keyset import keyset_filter

MAX_LIMIT = 500
MAX_OFFSET = 2**62  # PostgreSQL's OFFSET is a 64-bit integer


class KeysetPagination(BasePagination):
    """See the module docstring. The view names its default order in `keyset_ordering` (a list, the
    primary key last) and the columns a client may order by in `ordering_fields` (non-null columns only)."""

    cursor_query_param = "cursor"
    limit_query_param = "limit"
    ordering_query_param = "ordering"

    def _limit(self, request) -> int:
        return query_number(request, self.limit_query_param, 1, MAX_LIMIT, api_settings.PAGE_SIZE or 50)

    def _ordering(self, request, view) -> list[str]:
        from .filters import ordering_specs

        raw = request.query_params.get(self.ordering_query_param)
        if raw is None:
            return list(getattr(view, "keyset_ordering", ["-id"]))
        specs = ordering_specs(raw, set(getattr(view, "ordering_fields", ())), self.ordering_query_param)
        if not any(s.lstrip("-") in ("id", "pk") for s in specs):
            specs.append("-id" if specs[-1].startswith("-") else "id")
        return specs

    def _decode(self, token: str, ordering: list[str], model):
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
            values, direction, order = data["v"], data["d"], data["o"]
            if order != ordering or direction not in ("n", "p") or len(values) != len(ordering):
                raise ValueError
            fields = [model._meta.get_field("id" if s.lstrip("-") == "pk" else s.lstrip("-")) for s in ordering]
            values = [f.to_python(v) for f, v in zip(fields, values)]
            if any(v is None for v in values):
                raise ValueError  # the ordering columns hold no NULL: not a cursor this list gave
            return values, direction
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, DjangoValidationError,
                FieldDoesNotExist):
            raise ValidationError({self.cursor_query_param: [
                "not a cursor of this list with this ordering; follow the `next` / `previous` links as given"]}) \
                from None

    def _encode(self, row, direction: str) -> str:
        values = [getattr(row, s.lstrip("-")) for s in self.ordering]
        values = [v.isoformat() if hasattr(v, "isoformat") else v for v in values]
        raw = json.dumps({"v": values, "d": direction, "o": self.ordering}, separators=(",", ":"), default=str)
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        if "offset" in request.query_params or "page" in request.query_params:
            raise ValidationError({"offset" if "offset" in request.query_params else "page": [
                "this list pages by cursor (offset pages shift under inserts): follow the `next` link"]})
        self.limit = self._limit(request)
        self.ordering = self._ordering(request, view)
        self.count = queryset.count()
        token = request.query_params.get(self.cursor_query_param)
        direction = "n"
        qs = queryset
        if token is not None:
            values, direction = self._decode(token, self.ordering, queryset.model)
        # a previous page is read backwards from the cursor, then put back in the list's order
        order = self.ordering if direction == "n" else [s[1:] if s.startswith("-") else f"-{s}" for s in self.ordering]
        if token:
            qs = qs.filter(keyset_filter(order, values))
        rows = list(qs.order_by(*order)[: self.limit + 1])
        more = len(rows) > self.limit
        rows = rows[: self.limit]
        if direction == "n":
            self.has_next, self.has_previous = more, bool(token)
        else:
            rows.reverse()
            self.has_next, self.has_previous = True, more
        self.rows = rows
        return rows

    def _link(self, row, direction: str) -> str:
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param, self._encode(row, direction))

    def get_next_link(self):
        return self._link(self.rows[-1], "n") if self.has_next and self.rows else None

    def get_previous_link(self):
        if not self.has_previous:
            return None
        if not self.rows:
            return remove_query_param(self.request.build_absolute_uri(), self.cursor_query_param)
        return self._link(self.rows[0], "p")

    def get_paginated_response(self, data):
        return Response(OrderedDict([("count", self.count), ("next", self.get_next_link()),
                                     ("previous", self.get_previous_link()), ("results", data)]))

    def get_paginated_response_schema(self, schema):
        return {"type": "object", "required": ["count", "results"], "properties": {
            "count": {"type": "integer", "example": 123},
            "next": {"type": "string", "nullable": True, "format": "uri",
                     "description": "the next page (an opaque keyset cursor, stable under inserts)"},
            "previous": {"type": "string", "nullable": True, "format": "uri"},
            "results": schema}}

    def get_schema_operation_parameters(self, view):
        return [
            {"name": self.cursor_query_param, "required": False, "in": "query",
             "description": "opaque cursor from a `next` / `previous` link", "schema": {"type": "string"}},
            {"name": self.limit_query_param, "required": False, "in": "query",
             "description": f"rows per page, 1-{MAX_LIMIT}", "schema": {"type": "integer"}},
        ]


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """The default pages of the short lists (nodes, queues, quotas, ...): `limit` 1-500 (default PAGE_SIZE)
    and `offset` 0-2**62, both whole numbers. DRF's own class silently falls back to its default for a
    malformed, negative or oversized value; this one refuses it with a 400 naming the parameter and rule."""

    max_limit = MAX_LIMIT

    def get_limit(self, request):
        return KeysetPagination._limit(self, request)

    def get_offset(self, request):
        return query_number(request, self.offset_query_param, 0, MAX_OFFSET, 0)


def query_number(request, name: str, min_value: int, max_value: int, default: int) -> int:
    """The query parameter `name` read by the one number parser (inputs.parse_whole: ASCII digits, min_value to
    max_value), `default` when it is left out; a 400 naming it ("a whole number from 1 to 500") otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return parse_whole(name, raw, min_value, max_value, f"a whole number from {min_value} to {max_value}")
    except InputError as exc:
        raise ValidationError({name: [exc.message]}) from None
