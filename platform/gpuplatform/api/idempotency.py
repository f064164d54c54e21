"""`Idempotency-Key` on every creating POST: a retried submission never creates a second object.

A client sends `Idempotency-Key: <1-200 visible ASCII characters, no comma>` (once) with a POST that creates (a job, a queue,
a quota, a team, a membership, a node registration). The key is remembered per user for
IDEMPOTENCY_KEY_TTL_SECONDS (default 86,400 s = one day) together with the request's fingerprint (method,
path, canonical JSON of the parsed body: the same values form-encoded or as JSON are one request) and the response:

- the same key and the same request again -> the first response (same status and body, so the same id),
  with the header `Idempotent-Replayed: true`; nothing new is stored;
- the same key with a different request -> 409 `{"Idempotency-Key": [...]}` naming the endpoint it was used
  for ("another endpoint", or "with another body" on the same one); nothing is stored;
- a request that failed (any non-2xx answer) is not remembered: fix it and retry with the same key.

The key row is written in the same transaction as the object it created; two concurrent requests with one
key serialise on the (user, key) unique index, and the loser's object is rolled back and the winner's
response is replayed. A POST without the header behaves as before.
"""
from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from ..models import IdempotencyKey
from ..scheduling.locks import lock_name

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_CHARS = 200

IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
    description="optional, once, 1-200 visible ASCII characters but a comma: a retry with the same key and body answers with the "
                "first response (header `Idempotent-Replayed: true`) instead of creating again; the same key with "
                "another body is a 409. Remembered per user for IDEMPOTENCY_KEY_TTL_SECONDS (default one day); "
                "failed requests are not remembered.")


def ttl() -> timedelta:
    return timedelta(seconds=getattr(settings, "IDEMPOTENCY_KEY_TTL_SECONDS", 86400))


class IdempotencyConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_key_reused"


class _Replay(Exception):
    def __init__(self, response: Response):
        self.response = response


def _canonical(value):
    """The parsed value as a form could carry it: a number or boolean as its JSON text (5 -> "5", true ->
    "true"), so the same values sent form-encoded and as JSON compare equal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def fingerprint(request) -> str:
    """sha256 of the method, the path and the canonical JSON of the parsed body (request.data), not of its bytes:
    the same values sent form-encoded and then as JSON are the same request (new-user trial 25, C: a membership
    sent both ways with one key was a 409 "with another body"). A form field given once is its value, not a
    one-item list; numbers and booleans compare as their text (_canonical)."""
    return data_fingerprint(request.method, request.path, request.data)


def data_fingerprint(method: str, path: str, data, skip: tuple[str, ...] = ()) -> str:
    """fingerprint's sha256 of `data` (a parsed body: a QueryDict's fields, the CSRF token and `skip` left out, or
    JSON), for a caller holding no DRF request (the submit form's one-time token, frontend.views_jobs)."""
    if hasattr(data, "lists"):  # a QueryDict (form post)
        left_out = ("csrfmiddlewaretoken", *skip)
        data = {k: v[0] if len(v) == 1 else v for k, v in data.lists() if k not in left_out}
    body = json.dumps(_canonical(data), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"{method} {path}\n{body}".encode()).hexdigest()


def live_row(user, key: str) -> IdempotencyKey | None:
    """Take `key`'s lock for `user` (held to the transaction's commit: one key's requests one at a time) and return
    its row still within the TTL, or None. Inside a transaction."""
    lock_name("idempotency", f"{user.pk}:{key}")
    return IdempotencyKey.objects.filter(user=user, key=key, created_at__gte=timezone.now() - ttl()).first()


def conflict_words(key: str, row: IdempotencyKey, method: str, path: str) -> str:
    """The 409's sentence: the endpoint the key was used for when it is another one, "with another body" only
    when the endpoint is the same (new-user trial 25, C: a key reused on another endpoint read "(POST
    /api/v1/jobs/ with another body)", as if the body were the difference)."""
    if (row.method, row.path) != (method, path[:500]):
        what = f"for a different request ({row.method} {row.path}, another endpoint)"
    else:
        what = f"for a different request ({row.method} {row.path} with another body)"
    return f"key {key!r} was used {what} in the last {int(ttl().total_seconds())} s; use a new key for a new request"


def _replay(row: IdempotencyKey) -> Response:
    response = Response(row.body, status=row.status)
    response[REPLAYED_HEADER] = "true"
    if row.etag:
        response["ETag"] = row.etag
    return response


class IdempotentCreateMixin:
    """For viewsets: the actions named in `idempotent_actions` (default: create) honour Idempotency-Key.
    The lookup runs after authentication, permissions and throttles (`initial`); the handler and the key row
    share one transaction (`dispatch`)."""

    idempotent_actions: tuple[str, ...] = ("create",)

    def _idempotency_key(self, request) -> str | None:
        if request.method != "POST" or getattr(self, "action", None) not in self.idempotent_actions:
            return None
        key = request.headers.get(HEADER)
        if key is None:
            return None
        if "," in key:  # the server joins a header sent twice with a comma (new-user trial 12, F10: two keys
            # acted as one combined key)
            raise ValidationError({HEADER: ["given more than once: send one Idempotency-Key header (a key holds no "
                                            "comma)"]})
        if not key or len(key) > MAX_KEY_CHARS or not all(33 <= ord(c) <= 126 for c in key):
            raise ValidationError({HEADER: [f"an idempotency key is 1-{MAX_KEY_CHARS} visible ASCII characters "
                                            f"(no spaces)"]})
        return key

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self._idem = None
        key = self._idempotency_key(request)
        if key is None:
            return
        fp = fingerprint(request)
        # one key's requests one at a time (dispatch's transaction holds the lock to its commit): a retry sent while
        # the first is still running waits, then reads its row and replays it, rather than running the handler and
        # answering its "already exists" (new-user trial 16b, F1)
        row = live_row(request.user, key)
        if row is not None:
            if row.fingerprint != fp:
                raise IdempotencyConflict({HEADER: [conflict_words(key, row, request.method, request.path)]})
            raise _Replay(_replay(row))
        self._idem = (key, fp)

    def handle_exception(self, exc):
        if isinstance(exc, _Replay):
            return exc.response
        return super().handle_exception(exc)

    def dispatch(self, request, *args, **kwargs):
        if request.method != "POST" or HEADER not in request.headers:  # HttpHeaders: case-insensitive
            return super().dispatch(request, *args, **kwargs)
        with transaction.atomic():
            response = super().dispatch(request, *args, **kwargs)
            idem = getattr(self, "_idem", None)
            if not 200 <= response.status_code < 300:
                # A refused request stores nothing (and a database error the handler answered, e.g. a NUL in a
                # looked-up name, must not leave an aborted transaction to commit).
                transaction.set_rollback(True)
                return response
            if idem is None:
                return response
            key, fp = idem
            user = self.request.user
            now = timezone.now()
            IdempotencyKey.objects.filter(created_at__lt=now - ttl()).delete()  # forget expired keys
            try:
                with transaction.atomic():
                    IdempotencyKey.objects.create(user=user, key=key, fingerprint=fp, method=request.method,
                                                  path=request.path[:500], status=response.status_code,
                                                  body=response.data, etag=response.get("ETag", ""),
                                                  created_at=now)
            except IntegrityError:
                # A concurrent request with this key committed first: drop what this one created.
                row = IdempotencyKey.objects.filter(user=user, key=key).first()
                transaction.set_rollback(True)
                if row is None or row.fingerprint != fp:
                    response = Response({HEADER: [f"key {key!r} is in use by a concurrent request"]},
                                        status=status.HTTP_409_CONFLICT)
                else:
                    response = _replay(row)
                response = self.finalize_response(self.request, response, *args, **kwargs)
            return response
