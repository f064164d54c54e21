"""The API's token authentication: knox's, with one hole closed.

knox decodes the token as UTF-8 (`token.decode("utf-8")`), so a header holding a byte that is not UTF-8
(`Authorization: Token t\\xf6k`, what a latin-1 terminal sends for 'tökén') raised UnicodeDecodeError: a 500 on every
API endpoint (new-user trial 26, F1). No issued token holds such a byte (they are hex), so it is a wrong token like
any other: 401 "Invalid token." with knox's WWW-Authenticate (this class's authenticate_header, unchanged)."""
from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from rest_framework import exceptions


class TokenAuthentication(KnoxTokenAuthentication):
    """settings.REST_FRAMEWORK's first authentication class (every API endpoint, the node agents' included)."""

    def authenticate_credentials(self, token: bytes):
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("Invalid token.")) from None  # knox's own message for a wrong one
        return super().authenticate_credentials(token)
