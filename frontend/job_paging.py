"""The jobs page's sort and keyset (cursor) pages.

Every column can be the sort key (`?sort=name`, `?sort=-duration`); the job id breaks ties in the same
direction, so the order is total and a page continues strictly after the last row shown: jobs submitted
while someone reads page 3 do not shift page 4 (offset pages did). Columns that may be empty (started,
finished) sort the empty ones as the smallest value (last when descending); an empty duration (a job that
has not finished) sorts last in both directions.

    page = keyset_page(queryset, sort="-submitted", cursor=request.GET.get("cursor"), limit=50)
    page.rows, page.next_cursor, page.previous_cursor
"""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.db.models import DurationField, ExpressionWrapper, F, Value
from django.db.models.functions import Coalesce

from gpuplatform.keyset import keyset_filter

FAR_PAST = datetime(1970, 1, 1, tzinfo=timezone.utc)
NO_DURATION = timedelta(seconds=-1)
LAST_DURATION = timedelta(days=365 * 1000)  # above any run: sorts "no duration" last when ascending


def _duration(empty: timedelta):
    """finished_at - started_at, `empty` for a job that has not finished."""
    return Coalesce(ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField()),
                    Value(empty), output_field=DurationField())


# column -> (expression, kind of value for the cursor)
SORTS = {
    "submitted": (lambda: F("submitted_at"), "dt"),
    "started": (lambda: Coalesce(F("started_at"), Value(FAR_PAST)), "dt"),
    "finished": (lambda: Coalesce(F("finished_at"), Value(FAR_PAST)), "dt"),
    "duration": (lambda: _duration(NO_DURATION), "td"),
    "name": (lambda: F("name"), "str"),
    "team": (lambda: F("team__name"), "str"),
    "queue": (lambda: F("queue__name"), "str"),
    "state": (lambda: F("state"), "str"),
    "gpus": (lambda: F("gpus_milli"), "int"),  # GPU-equivalents in thousandths (queries.job_list)
    "priority": (lambda: F("priority"), "int"),
    "id": (lambda: F("id"), "int"),
}
# a column whose ascending order needs another expression: an unfinished job's duration sorts last, not first
ASCENDING = {"duration": lambda: _duration(LAST_DURATION)}
DEFAULT_SORT = "-submitted"


def parse_sort(value: str | None) -> tuple[str, bool]:
    """'-duration' -> ('duration', True). Unknown columns fall back to the default (newest first)."""
    value = (value or DEFAULT_SORT).strip()
    column, descending = value.lstrip("-"), value.startswith("-")
    if column not in SORTS:
        column, descending = DEFAULT_SORT.lstrip("-"), True
    return column, descending


def cursor_error(cursor: str | None, sort: str | None) -> str | None:
    """The rule a `cursor` breaks (the jobs page says it with a 400 rather than show page 1 silently), or None:
    it must be a token this page made for the list's sort (from its next / previous links)."""
    if not cursor:
        return None
    column, _ = parse_sort(sort)
    if _decode(cursor, SORTS[column][1]) is None:
        return (f"cursor: not a page of this list sorted by {column}; follow the page's next / previous links "
                f"(or leave it out for the first page)")
    return None


def _encode(value, kind: str, pk: int, direction: str) -> str:
    if kind == "dt":
        value = value.isoformat()
    elif kind == "td":
        value = value.total_seconds()
    raw = json.dumps([value, pk, direction], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(token: str, kind: str):
    """-> (value, id, direction) or None for a token that is not one of ours (the first page is shown)."""
    try:
        value, pk, direction = json.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
        if direction not in ("n", "p") or not isinstance(pk, int):
            return None
        if kind == "dt":
            value = datetime.fromisoformat(value)
        elif kind == "td":
            value = timedelta(seconds=float(value))
        elif kind == "int" and not isinstance(value, int):
            return None
        elif kind == "str" and not isinstance(value, str):
            return None
        return value, pk, direction
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, OverflowError):
        return None


@dataclass
class Page:
    rows: list
    next_cursor: str | None
    previous_cursor: str | None
    sort: str           # the column
    descending: bool


def keyset_page(queryset, *, sort: str | None, cursor: str | None, limit: int) -> Page:
    column, descending = parse_sort(sort)
    expression, kind = SORTS[column]
    if not descending and column in ASCENDING:
        expression = ASCENDING[column]
    qs = queryset.annotate(sort_key=expression())
    order = ["-sort_key", "-id"] if descending else ["sort_key", "id"]
    reverse = ["sort_key", "id"] if descending else ["-sort_key", "-id"]
    decoded = _decode(cursor, kind) if cursor else None
    if decoded is None:
        rows = list(qs.order_by(*order)[: limit + 1])
        has_next, has_previous = len(rows) > limit, False
        rows = rows[:limit]
    elif decoded[2] == "n":
        rows = list(qs.filter(keyset_filter(order, [decoded[0], decoded[1]])).order_by(*order)[: limit + 1])
        has_next, has_previous = len(rows) > limit, True
        rows = rows[:limit]
    else:
        rows = list(qs.filter(keyset_filter(reverse, [decoded[0], decoded[1]])).order_by(*reverse)[: limit + 1])
        has_previous, has_next = len(rows) > limit, True
        rows = list(reversed(rows[:limit]))
    return Page(rows=rows,
                next_cursor=_encode(rows[-1].sort_key, kind, rows[-1].pk, "n") if has_next and rows else None,
                previous_cursor=_encode(rows[0].sort_key, kind, rows[0].pk, "p") if has_previous and rows else None,
                sort=column, descending=descending)
