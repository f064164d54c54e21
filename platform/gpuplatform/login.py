"""The pages' sign-in redirect: Django's login_required, with the login page's `next` kept to what the login
view will follow.

Django's redirect puts the whole address in `next=`. A very long one (`/jobs/?q=` and 17,000 characters) made a
redirect longer than Django allows (16,384: DisallowedRedirect), so the user got the generic "Bad Request (400)"
page and the log an ERROR with a traceback (new-user trial 23). The login view follows a `next` of at most
django.utils.http.MAX_URL_LENGTH (2,048) characters only (url_has_allowed_host_and_scheme; a longer one goes to
LOGIN_REDIRECT_URL), so a longer address is cut to its path (the page without its query: /jobs/), or left out
when the path alone is longer: the user always lands on the login page.
"""
from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseRedirect
from django.shortcuts import resolve_url
from django.utils.http import MAX_URL_LENGTH


def login_next(request) -> str:
    """The `next` of the login redirect: the address asked for, its path alone when that is longer than the login
    view follows, or "" (none) when the path is too."""
    full = request.get_full_path()
    if len(full) <= MAX_URL_LENGTH:
        return full
    path = full.split("?", 1)[0]  # get_full_path escapes the path: a "?" in it starts the query
    return path if len(path) <= MAX_URL_LENGTH else ""


def login_redirect(request) -> HttpResponseRedirect:
    """A redirect to the login page (LOGIN_URL) with login_next as `next`, or without `next` when it is ""."""
    following = login_next(request)
    if not following:
        return HttpResponseRedirect(resolve_url(settings.LOGIN_URL))
    return redirect_to_login(following)


def login_required(view):
    """django.contrib.auth.decorators.login_required for the pages (LOGIN_URL on this site), with login_redirect."""
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        return login_redirect(request)
    return wrapped
