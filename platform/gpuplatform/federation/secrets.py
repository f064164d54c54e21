"""Member clusters' service tokens at rest: Fernet (AES-128-CBC + HMAC-SHA256, the `cryptography` package)
with a key derived from FEDERATION_TOKEN_KEY (default: SECRET_KEY) by SHA-256. A database dump alone does
not reveal a token; rotating the key makes the stored tokens unreadable (re-enter them).

    encrypt(raw: str) -> str      decrypt(stored: str) -> str (raises TokenUnreadable)
"""
from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

__all__ = ["encrypt", "decrypt", "TokenUnreadable", "masked"]


class TokenUnreadable(RuntimeError):
    """The stored token was encrypted with another key (FEDERATION_TOKEN_KEY / SECRET_KEY changed)."""


def _fernet() -> Fernet:
    secret = getattr(settings, "FEDERATION_TOKEN_KEY", "") or settings.SECRET_KEY
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(("federation-token:" + secret).encode()).digest()))


def encrypt(raw: str) -> str:
    return _fernet().encrypt(raw.encode()).decode()


def decrypt(stored: str) -> str:
    try:
        return _fernet().decrypt(stored.encode()).decode()
    except InvalidToken as exc:
        raise TokenUnreadable("the member's token was stored with another FEDERATION_TOKEN_KEY; enter it again") from exc


def masked(stored: str) -> str:
    """What pages show: whether a token is set, never any of it."""
    return "set (encrypted)" if stored else "not set"
