"""API tokens (django-rest-knox): only a hash is stored, each token has an expiry, any can be revoked.

A token is 64 hex characters (256 random bits). The database keeps its SHA-512 digest and its first 15
characters (`token_key`, the lookup index), never the token itself: the caller sees it once, when it is
issued (the token endpoint's response, `manage.py agent_token`, the admin's "TOKEN ..." message). A user
may hold several (one per script or machine); each is revoked alone (`revoke_api_tokens(user, token=...)`,
`POST /api/v1/auth-token/revoke/` with the token itself, the admin's "Auth tokens") or all together (the same
endpoint with the username, password and all=true: a user who holds the cap and kept no token is never locked out).

Lifetimes: API_TOKEN_TTL_DAYS (default 30) for tokens a person asks for, AGENT_TOKEN_TTL_DAYS (default 365)
for node-agent tokens. An expired token is refused (401) and deleted on its next use (knox.auth). A user
holds at most API_TOKENS_PER_USER (default 20) unexpired tokens: one more is refused until one is revoked
or expires (a script that logs in on every run would otherwise pile them up).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from knox.models import AuthToken

from ..audit import record_event
from ..errors import ValidationError

__all__ = ["issue_api_token", "revoke_api_tokens", "api_token_ttl", "agent_token_ttl"]


def api_token_ttl() -> timedelta:
    return timedelta(days=float(getattr(settings, "API_TOKEN_TTL_DAYS", 30)))


def agent_token_ttl() -> timedelta:
    return timedelta(days=float(getattr(settings, "AGENT_TOKEN_TTL_DAYS", 365)))


@transaction.atomic
def issue_api_token(user, *, ttl: timedelta | None = None, actor=None, purpose: str = "api") -> tuple[str, datetime]:
    """A new token for `user`, valid for `ttl` (default api_token_ttl(); must be positive). Returns
    (token, expiry): the token is not stored and cannot be shown again. Audited as `api_token_issued`
    (with the digest's first 12 characters to tell tokens apart, never the token). Expired tokens of the
    user are deleted first. Raises ValidationError ("user": inactive user, or API_TOKENS_PER_USER unexpired
    tokens already; "ttl": not positive)."""
    ttl = api_token_ttl() if ttl is None else ttl
    if not user.is_active:
        raise ValidationError({"user": f"user {user} is inactive: an inactive user gets no token"})
    if ttl <= timedelta(0):
        raise ValidationError({"ttl": "a token's lifetime must be positive"})
    AuthToken.objects.filter(user=user, expiry__lt=timezone.now()).delete()  # expired: gone anyway
    limit = int(getattr(settings, "API_TOKENS_PER_USER", 20))
    if AuthToken.objects.filter(user=user).count() >= limit:
        raise ValidationError({"user": f"{user} already holds {limit} unexpired tokens (API_TOKENS_PER_USER): "
                                       f"reuse one, or revoke one (POST /api/v1/auth-token/revoke/ with it in "
                                       f"Authorization: Token ...), or revoke all of them with your username and "
                                       f"password (curl -X POST "
                                       f"$GPUCTL_API/api/v1/auth-token/revoke/ -d username={user} -d password=... "
                                       f"-d all=true)"})
    instance, token = AuthToken.objects.create(user=user, expiry=ttl)
    record_event("api_token_issued", f"{purpose} token issued to {user}, expires {instance.expiry:%Y-%m-%d %H:%M} UTC",
                 actor=actor, data={"user": str(user), "id": instance.digest[:12], "purpose": purpose,
                                            "expiry": instance.expiry.isoformat()})
    return token, instance.expiry


@transaction.atomic
def revoke_api_tokens(user, *, token: AuthToken | None = None, keep: int = 0, actor=None) -> int:
    """Revoke `token` (one of `user`'s AuthToken rows) or, without it, every token of `user` but its `keep`
    newest (default none kept). Returns how many were revoked; audited as `api_token_revoked`. Raises
    ValidationError ("token") for a token of another user."""
    if token is not None and token.user_id != user.pk:
        raise ValidationError({"token": "that token belongs to another user"})
    rows = AuthToken.objects.filter(user=user)
    if token is not None:
        rows = rows.filter(digest=token.digest)
    elif keep > 0:
        kept = list(rows.order_by("-created", "-digest").values_list("digest", flat=True)[:keep])
        rows = rows.exclude(digest__in=kept)
    ids = [d[:12] for d in rows.values_list("digest", flat=True)]
    count = rows.delete()[0]
    if count:
        record_event("api_token_revoked", f"{count} token(s) of {user} revoked", actor=actor,
                     data={"user": str(user), "ids": ids})
    return count
