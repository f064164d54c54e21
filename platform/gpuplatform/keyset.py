"""Keyset (cursor) paging, shared by the API's cursor pages (api/pagination.py) and the jobs page
(frontend/job_paging.py): the rows strictly after a row, in a total order."""
from __future__ import annotations

from django.db.models import Q

__all__ = ["keyset_filter"]


def keyset_filter(ordering: list[str], values: list) -> Q:
    """Rows strictly after `values` in `ordering` (e.g. ["-submitted_at", "-id"]; names may be annotations):
    the lexicographic (a, b, ...) comparison with each column's own direction, as an OR of prefix-equal terms."""
    clause = Q(pk__in=[])
    for i, spec in enumerate(ordering):
        field = spec.lstrip("-")
        term = Q(**{f"{field}__{'lt' if spec.startswith('-') else 'gt'}": values[i]})
        for prev, value in zip(ordering[:i], values[:i]):
            term &= Q(**{prev.lstrip("-"): value})
        clause |= term
    return clause
