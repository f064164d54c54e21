from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

__all__ = ["IdempotencyKey"]


class IdempotencyKey(models.Model):
    """A creating POST's `Idempotency-Key`, remembered per user for IDEMPOTENCY_KEY_TTL_SECONDS (default one
    day): the request's fingerprint (sha256 of method, path and canonical JSON body) and the response it got
    (status, body, ETag), replayed to a retry with the same key and body (api/idempotency.py)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField(encoder=DjangoJSONEncoder, null=True)
    etag = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotencykey_unique_per_user")]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
