"""Polling that sends only what changed: the JSON endpoints the pages poll answer with a strong `ETag`
(a hash of the body) and a request whose `If-None-Match` holds it gets `304 Not Modified` with no body.
poll.js keeps the last ETag per URL and sends it back, so an open tab costs a few hundred bytes per poll
while nothing changes (benchmarks/poll_bytes.py measures it)."""
from __future__ import annotations

import hashlib
from functools import wraps

from django.http import HttpResponseNotModified


def etag_of(content: bytes) -> str:
    return '"' + hashlib.sha256(content).hexdigest()[:32] + '"'


def conditional_json(view):
    """Decorator for GET views returning a JSON / CSV body: add ETag; 304 when If-None-Match matches."""
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        if request.method != "GET" or response.status_code != 200 or getattr(response, "streaming", False):
            return response
        tag = etag_of(response.content)
        response["ETag"] = tag
        sent = {t.strip().removeprefix("W/") for t in request.headers.get("If-None-Match", "").split(",")}
        if tag in sent:
            not_modified = HttpResponseNotModified()
            not_modified["ETag"] = tag
            if response.has_header("Cache-Control"):
                not_modified["Cache-Control"] = response["Cache-Control"]
            return not_modified
        return response
    return wrapped


def login_required_json(view):
    """Decorator for the pages' JSON endpoints (metrics.json, data.json, the estimate): a request without a
    signed-in session is a JSON 401 `{"detail": ...}`, as the REST API answers, not a 302 to the HTML login
    page that a script would read as HTML (new-user trial 8, F15). The HTML pages keep login_required's
    redirect. A signed-in unsafe request without a valid CSRF token is a JSON 403 {"detail": "CSRF Failed: ..."}."""
    from django.http import JsonResponse
    from django.views.decorators.csrf import csrf_exempt
    from rest_framework.authentication import CSRFCheck
    from rest_framework.exceptions import NotAuthenticated

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return JsonResponse({"detail": str(NotAuthenticated.default_detail)}, status=401)  # the API's words
        # The CSRF check runs here, after the session check, and answers in JSON as the API's session
        # authentication does (rest_framework.authentication.SessionAuthentication.enforce_csrf): the
        # middleware's HTML 403 came first for a POST without a session (new-user trial 9, F12).
        check = CSRFCheck(lambda _request: None)
        check.process_request(request)
        reason = check.process_view(request, None, (), {})
        if reason:
            return JsonResponse({"detail": f"CSRF Failed: {reason}"}, status=403)
        return view(request, *args, **kwargs)
    return csrf_exempt(wrapped)
