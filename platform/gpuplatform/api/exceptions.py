"""One error shape for the whole API (documented in the OpenAPI schema as `FieldErrors`):

    400 {"<field path>": ["<rule broken>", ...], ...}

The field path is flat, the same whether the rule lives in a serializer or in a service: `name`,
`roles[0].tasks` (a list item's field), `env.NCCL_DEBUG` (a mapping's key), `non_field_errors` (the body as a
whole). DRF's nested serializer errors (`{"roles": [{}, {"tasks": [...]}]}`) are flattened to that path
here, and the services' `gpuplatform.services.ValidationError` (field -> message) is turned into the same
shape, so a script reads one format. Nothing is stored in either case (the services validate before
writing, inside one transaction). Every 400 has this shape (a malformed
JSON body is `{"non_field_errors": ["JSON parse error - ..."]}`). Errors that are not about the body (401,
403, 404, 405, 412, 428, 429) keep DRF's `{"detail": "<message>"}` (schema `Error`).
"""
from __future__ import annotations

from django.db import DataError
from django.db.models import ProtectedError
from rest_framework import status
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..services import ValidationError as ServiceValidationError


NON_FIELD = "non_field_errors"


def service_errors(exc: ServiceValidationError) -> dict[str, list[str]]:
    return {(NON_FIELD if k == "__all__" else k): [str(v)] for k, v in exc.errors.items()}


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's error detail (nested dicts and lists of ErrorDetail) -> {"roles[1].tasks": ["..."]}.
    A mapping key extends the path with `.key`, a list item with `[i]`; `non_field_errors` of a nested
    object is reported at the object's own path."""
    out: dict[str, list[str]] = {}

    def add(path: str, message) -> None:
        out.setdefault(path or NON_FIELD, []).append(str(message))

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, int) and path:  # a ListField's item: gpus[0], not gpus.0 (new-user trial 12, F9)
                    walk(value, f"{path}[{key}]")
                    continue
                key = str(key)
                walk(value, path if key in (NON_FIELD, "__all__") else (f"{path}.{key}" if path else key))
        elif isinstance(node, (list, tuple)):
            if all(not isinstance(item, (dict, list, tuple)) for item in node):
                for item in node:
                    add(path, item)
            else:
                for i, item in enumerate(node):
                    if item:
                        walk(item, f"{path}[{i}]")
        else:
            add(path, node)

    walk(detail, prefix)
    return out


def exception_handler(exc, context):
    if isinstance(exc, ServiceValidationError):
        return Response(service_errors(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DRFValidationError):
        response = drf_exception_handler(exc, context)
        if response is not None:
            response.data = flatten_errors(exc.detail)
        return response
    if isinstance(exc, ProtectedError):
        return Response({"non_field_errors": ["still referenced by other objects; remove those first"]},
                        status=status.HTTP_409_CONFLICT)
    if isinstance(exc, DataError) and "out of range" in str(exc):
        # Backstop: a number no field bounded reached a column too small for it. Every input field has its
        # own bounds (their messages name them); this names the body's oversized field when it can.
        request = context.get("request")
        where = (getattr(request, "oversized_paths", None) or [NON_FIELD])[0]
        return Response({where: ["a number is out of range for what is stored there"]},
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DataError) and "NUL" in str(exc):
        # A NUL in a name the view looked up (a path, a filter, a related name): PostgreSQL refuses it.
        where = _nul_field(context)
        return Response({where: ["NUL characters are not accepted"]}, status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is not None and response.status_code == 400 and isinstance(response.data, dict) \
            and set(response.data) == {"detail"}:
        # A 400 that is not about one field (a malformed JSON body, ...): the same shape, the whole request.
        response.data = {NON_FIELD: [str(response.data["detail"])]}
    return response


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
