"""One error shape for the whole API: `{"<field>": ["<rule broken>"]}` with HTTP 400.

DRF's own validation errors already have that shape. The services raise
`gpuplatform.services.ValidationError` (field -> message); it is turned into the same shape here, so a
script sees one format whether a rule lives in a serializer or in a service. Nothing is stored in either
case (the services validate before writing, inside one transaction).
"""
from __future__ import annotations

from django.db import DataError
from django.db.models import ProtectedError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..services import ValidationError as ServiceValidationError


def service_errors(exc: ServiceValidationError) -> dict[str, list[str]]:
    return {("non_field_errors" if k == "__all__" else k): [v] for k, v in exc.errors.items()}


def exception_handler(exc, context):
    if isinstance(exc, ServiceValidationError):
        return Response(service_errors(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ProtectedError):
        return Response({"non_field_errors": ["still referenced by other objects; remove those first"]},
                        status=status.HTTP_409_CONFLICT)
    if isinstance(exc, DataError) and "NUL" in str(exc):
        # A NUL in a name the view looked up (a path, a filter, a related name): PostgreSQL refuses it.
        where = _nul_field(context)
        return Response({where: ["NUL characters are not accepted"]}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


def _nul_field(context) -> str:
    """The first request field (body, then query string) whose value holds a NUL, else non_field_errors."""
    request = context.get("request")
    for source in (getattr(request, "data", None), getattr(request, "query_params", None)):
        try:
            items = list(source.items()) if source is not None else []
        except AttributeError:
            items = []
        for key, value in items:
            if "\x00" in str(key) or "\x00" in str(value):
                return str(key).replace("\x00", "")
    return "non_field_errors"
