"""Brute-force protection for the two places a password is checked: the API's token endpoint
(`/api/v1/auth-token/`) and the login page (`/accounts/login/`).

Failed attempts are counted in the shared cache (Redis when REDIS_URL is set: every gunicorn process
counts together) over a window of AUTH_LOCKOUT_WINDOW_SECONDS, three ways:
- per (username, client address): AUTH_LOCKOUT_USER_FAILURES locks that username out FROM THAT ADDRESS;
- per client address, whatever the username: AUTH_LOCKOUT_ADDRESS_FAILURES (one address spraying names);
- per username, from every address together: AUTH_LOCKOUT_USER_ANY_ADDRESS_FAILURES (default 10 x the
  per-address figure: guessing spread over many addresses).
Only a password that was checked and refused counts: a request refused for its shape (an unknown field, a key
given twice, a missing username or password) is no sign-in attempt. A lock-out refuses further attempts with 429 and `Retry-After` BEFORE the password is hashed (a flood costs
no CPU) until the window passes; a success does not clear the window's failures (it gives back only its own
count). Each attempt is counted before its password is checked (take_attempt), so concurrent guesses cannot pass
the check together. The right password is refused too
while locked out: that is the point. Keying the first count by address means that a stranger's failures
for a known username do not lock its owner out of their own address (a lock-out anyone could cause: the
OWASP authentication cheat sheet's "account lockout" denial of service); only the much higher all-address
ceiling can, and reaching it takes that many addresses. The client address is REMOTE_ADDR (gunicorn sets it
from X-Forwarded-For only for --forwarded-allow-ips proxies).
"""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.response import Response
from rest_framework.views import APIView

from .api.serializers.base import Serializer, StrictFieldsMixin


def _limits() -> tuple[int, int, int, int]:
    """(per username and address, per address, per username from every address, window seconds)."""
    per_user = int(getattr(settings, "AUTH_LOCKOUT_USER_FAILURES", 10))
    any_address = getattr(settings, "AUTH_LOCKOUT_USER_ANY_ADDRESS_FAILURES", None)
    return (per_user, int(getattr(settings, "AUTH_LOCKOUT_ADDRESS_FAILURES", 50)),
            int(any_address) if any_address is not None else 10 * per_user,
            int(getattr(settings, "AUTH_LOCKOUT_WINDOW_SECONDS", 900)))


def _keys(request, username: str) -> tuple[str, str, str]:
    """Cache keys: (username at this address, this address, username from anywhere)."""
    user = hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]
    address = request.META.get("REMOTE_ADDR", "")
    return f"auth-fail:user-addr:{user}:{address}", f"auth-fail:addr:{address}", f"auth-fail:user:{user}"


def _incr(key: str, window: int) -> int:
    """Add 1 to the count at `key` (created with the window's expiry; an increment keeps it) and return it."""
    if cache.add(key, 1, window):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, window)
        return 1


def _decr(keys) -> None:
    for key in keys:
        try:
            cache.decr(key)
        except ValueError:  # expired meanwhile: nothing to take back
            pass


def take_attempt(request, username: str) -> int:
    """Count this sign-in attempt as a failure BEFORE its password is checked, in one atomic increment per count
    (the shared cache's INCR), and return the seconds to wait (the window) when that takes this username at this
    address, this address, or this username from every address past its limit, else 0. A refused attempt takes its
    increments back (a locked-out request counts nothing more). The password check then either keeps the count (a
    wrong password), or gives it back (`give_back`: a request refused for its shape) or clears it
    (`record_success` gives it back too). Checking first and counting after let concurrent guesses all pass the check: 30 wrong
    passwords at once had 12 checked against a limit of 10 (new-user trial 16b, F8); now at most the limit are."""
    per_user, per_address, any_address, window = _limits()
    keys = _keys(request, username)
    counts = [_incr(key, window) for key in keys]
    if any(n > limit for n, limit in zip(counts, (per_user, per_address, any_address))):
        _decr(keys)
        return window
    return 0


def give_back(request, username: str) -> None:
    """Take back take_attempt's count: the request was no sign-in attempt (refused for its shape, an empty field)."""
    _decr(_keys(request, username))


def record_success(request, username: str) -> None:
    """A right password: this attempt's counts are given back; the window's failures stay counted. Clearing them
    on a success also wiped the counts of wrong passwords still in flight (15 wrong and 5 right at once had all 15
    checked against a limit of 10), and let anyone guess without limit at an account its owner or a script signs
    in to regularly (trial 17c, G8). django-axes' default (AXES_RESET_ON_SUCCESS off) is the same."""
    give_back(request, username)


LOCKED_MESSAGE = "too many failed sign-in attempts; try again later"


class StrictAuthTokenSerializer(StrictFieldsMixin, AuthTokenSerializer):
    """DRF's username + password check, with the rules of every other body of the API (api/serializers/base.py):
    an unknown field and a form key given twice are refused naming them, as the project's JSON parser refuses a
    JSON key given twice (new-user trial 13, F3: `{"username": "demo", "username": "admin", ...}` issued a token
    for admin, the last, while a proxy or a log reading the first saw demo).

    `credentials_checked` is true once a username and a password reached the password check: only then is a
    refusal a failed sign-in that counts toward the lock-out (new-user trial 14, F17: ten requests with the right
    password and an unknown field locked the user out)."""

    credentials_checked = False

    def validate(self, attrs):
        self.credentials_checked = bool(attrs.get("username") and attrs.get("password"))
        return super().validate(attrs)


_TOKEN_RESPONSE = inline_serializer("IssuedToken", {
    "token": serializers.CharField(help_text="the token (64 hex characters): shown once, only a hash is kept"),
    "expiry": serializers.DateTimeField(help_text="when it stops working (API_TOKEN_TTL_DAYS after issue)")})


def _password_checked(view, request, serializer_class):
    """The lock-out-counted password check both token endpoints share: take_attempt before the check, the count
    given back for a request refused for its shape (no password checked) and for a right password. Returns
    (user, None), or (None, the refusal: 429 + Retry-After while locked out, 400 naming the fault)."""
    data = request.data if hasattr(request.data, "get") else {}  # a JSON list or scalar: a 400 below
    username = str(data.get("username", ""))
    wait = take_attempt(request, username)
    if wait:
        return None, Response({"detail": LOCKED_MESSAGE}, status=status.HTTP_429_TOO_MANY_REQUESTS,
                              headers={"Retry-After": str(wait)})
    serializer = serializer_class(data=data, context={"request": request, "view": view})
    try:
        valid = serializer.is_valid()
    except BaseException:
        give_back(request, username)
        raise
    if not valid:
        if not serializer.credentials_checked:  # refused for its shape, not a wrong password: no attempt
            give_back(request, username)
        return None, Response(serializer.errors, status=status.HTTP_400_BAD_REQUEST)
    record_success(request, username)
    return serializer.validated_data["user"], None


class ThrottledObtainAuthToken(APIView):
    """POST username + password -> {"token", "expiry"}: a NEW token each time (services.issue_api_token:
    stored hashed, shown only in this response, valid API_TOKEN_TTL_DAYS); 400 for wrong credentials, an unknown
    field or a key given twice (JSON or form), 429 + Retry-After once locked out (see the module docstring)."""

    authentication_classes = ()
    permission_classes = ()
    throttle_classes = ()
    # the API's parsers (settings: api/parsers.JSONParser refuses a JSON key given twice), not DRF's lenient one
    serializer_class = StrictAuthTokenSerializer

    def get_serializer(self, *args, **kwargs):
        return self.serializer_class(*args, context={"request": self.request}, **kwargs)

    @extend_schema(request=StrictAuthTokenSerializer, responses={200: _TOKEN_RESPONSE, 400: OpenApiResponse(
        description="wrong username or password"), 429: OpenApiResponse(description="locked out; see Retry-After")})
    def post(self, request, *args, **kwargs):
        user, refusal = _password_checked(self, request, self.serializer_class)
        if refusal is not None:
            return refusal
        from .services import issue_api_token

        token, expiry = issue_api_token(user, actor=user)
        return Response({"token": token, "expiry": expiry})


class RevokeTokensSerializer(Serializer):
    all = serializers.BooleanField(required=False, default=False,
                                   help_text="revoke every token of the user, not only this one")


PASSWORD_REVOKE_ALL = ("with a username and password, send all=true: every token of the user is revoked (to revoke "
                       "one token, send that token in Authorization instead)")


class RevokeWithPasswordSerializer(StrictAuthTokenSerializer):
    """username + password + all=true: the revoke endpoint's sign-in for a user without a working token (one who
    holds API_TOKENS_PER_USER and kept none: new-user trial 23, locked out, since revoking needed a token). The
    `all` rule is checked before the password, so leaving it out is no sign-in attempt."""

    all = serializers.BooleanField(required=False, default=False, help_text="must be true: every token of the user")

    def validate(self, attrs):
        if not attrs.get("all"):
            raise serializers.ValidationError({"all": [PASSWORD_REVOKE_ALL]})
        return super().validate(attrs)


class RevokeAuthToken(APIView):
    """POST (authenticated with a token) -> 204: that token stops working at once. With `{"all": true}`:
    every token of the user (services.revoke_api_tokens). A session (browser) user may only revoke all.
    Without a token, the username and password the token endpoint takes, with all=true, revoke every token of
    that user: counted toward the same lock-out as the token endpoint and the login page (a wrong password counts;
    429 + Retry-After once locked out), so a user who holds API_TOKENS_PER_USER tokens and has lost them all is
    never locked out of the API."""

    permission_classes = ()
    throttle_classes = ()

    @extend_schema(request=inline_serializer("RevokeTokens", {
        "all": serializers.BooleanField(required=False, default=False, help_text=(
            "revoke every token of the user, not only the one sent (needed with username and password)")),
        "username": serializers.CharField(required=False, help_text="without a token: the user's name, with password"),
        "password": serializers.CharField(required=False, help_text="without a token: the user's password "
                                          "(counted toward the sign-in lock-out, as at auth-token/)")}),
        responses={204: OpenApiResponse(description="revoked"), 400: (
        OpenApiResponse(description="an unknown field, `all` given twice or not a boolean, a session request "
                                    "without all=true, or a wrong username or password")),
        401: OpenApiResponse(description="no token, session, or username and password"),
        429: OpenApiResponse(description="locked out (a username and password); see Retry-After")})
    def post(self, request, *args, **kwargs):
        from knox.models import AuthToken
        from rest_framework.exceptions import NotAuthenticated

        from .errors import ValidationError
        from .services import revoke_api_tokens

        data = request.data if hasattr(request.data, "get") else {}
        if not request.user.is_authenticated and ("username" in data or "password" in data):
            user, refusal = _password_checked(self, request, RevokeWithPasswordSerializer)
            if refusal is not None:
                return refusal
            revoke_api_tokens(user, actor=user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        if not request.user.is_authenticated:
            raise NotAuthenticated("Authentication credentials were not provided: a token (Authorization: Token ...), "
                                   "or the username and password with all=true")
        body = RevokeTokensSerializer(data=data)
        body.is_valid(raise_exception=True)  # unknown fields, a key given twice, a non-boolean: 400 naming it
        everything = body.validated_data["all"]
        if not everything and not isinstance(request.auth, AuthToken):
            raise ValidationError({"all": "signed in without a token: only all=true (every token) can be revoked"})
        revoke_api_tokens(request.user, token=None if everything else request.auth, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThrottledLoginView(auth_views.LoginView):
    """Django's login page with the same lock-out: a locked-out POST answers 429 with Retry-After."""

    def post(self, request, *args, **kwargs):
        repeated = [key for key in ("username", "password") if len(request.POST.getlist(key)) > 1]
        if repeated:  # the form would read the last silently, as the API's token endpoint did (trial 13, F3)
            return HttpResponse(f"{repeated[0]}: given more than once: send it once\n", status=400,
                                content_type="text/plain")
        username = request.POST.get("username", "")
        wait = take_attempt(request, username)
        if wait:
            response = HttpResponse(LOCKED_MESSAGE + "\n", status=429, content_type="text/plain")
            response["Retry-After"] = str(wait)
            return response
        try:
            return super().post(request, *args, **kwargs)
        except BaseException:
            give_back(request, username)
            raise

    def form_invalid(self, form):
        if not (form.has_error(NON_FIELD_ERRORS, "invalid_login") or form.has_error(NON_FIELD_ERRORS, "inactive")):
            # the password was not checked (an empty field): no sign-in attempt (new-user trial 14, F17)
            give_back(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)

    def form_valid(self, form):
        record_success(self.request, self.request.POST.get("username", ""))
        return super().form_valid(form)
