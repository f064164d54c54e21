"""Shared viewset plumbing: optimistic concurrency (ETag / If-Match) and the visibility helpers."""
from __future__ import annotations

import hashlib
import json

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import APIException

IF_MATCH = OpenApiParameter(
    "If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True,
    description="the ETag from your last GET of this object; 412 if it changed since (or a weak W/ tag), 428 if "
                "missing; `*` matches any current version (overwrites without the check)")


class PreconditionRequired(APIException):
    status_code = 428
    default_detail = "this update needs an If-Match header with the object's current ETag (GET it first)"
    default_code = "precondition_required"


class PreconditionFailed(APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "the object changed since you read it (ETag mismatch); GET it again and retry"
    default_code = "precondition_failed"


class ETagMixin:
    """NetBox-style optimistic concurrency for detail views: GET returns an `ETag` (a hash of the
    object's representation); PUT/PATCH must send it back in `If-Match`, else 428; a stale one gets 412.
    The check and the write happen under a row lock in one transaction, so two admins cannot both pass
    the check with the same ETag."""

    def etag_for(self, obj) -> str:
        data = self.get_serializer(obj).data
        digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:32]
        return f'"{digest}"'

    def retrieve(self, request, *args, **kwargs):
        obj = self.get_object()
        response = super().retrieve(request, *args, **kwargs)
        response["ETag"] = self.etag_for(obj)
        return response

    def locked_object(self):
        """Inside a transaction: the object, row-locked, after checking If-Match. Raises 428 / 412."""
        obj = self.get_object()  # visibility and object permissions first (404 / 403)
        # FOR NO KEY UPDATE: the row's key does not change, so a foreign key check on it (another request's row
        # that points at it: a queue moved under this one) does not wait for this lock (new-user trial 16, F5)
        type(obj).objects.select_for_update(no_key=True).filter(pk=obj.pk).first()
        obj = self.get_object()  # fresh after the lock
        header = self.request.headers.get("If-Match")
        if not header:
            raise PreconditionRequired()
        # RFC 9110 13.1.1: If-Match compares strongly (a weak W/"..." tag matches nothing) and "*" matches any
        # current representation: an explicit "overwrite whatever is there", allowed and documented (docs/api.md;
        # new-user trial 11, F17). A list matches when one of its tags does.
        tags = {t.strip() for t in header.split(",") if t.strip()}
        if "*" not in tags and self.etag_for(obj) not in tags:
            raise PreconditionFailed()
        return obj

    def with_etag(self, response, obj):
        response["ETag"] = self.etag_for(obj)
        return response


atomic = transaction.atomic
