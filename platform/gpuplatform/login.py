"""The pages' sign-in redirect: Django's login_required, with the login page's `next` kept to what the login
view will follow.

Django's redirect puts the whole address in `next=`. A very long one (`/jobs/?q=` and 17,000 characters) made a
redirect longer than Django allows (16,384: DisallowedRedirect), so the user got the generic "Bad Request (400)"
page and the log an ERROR with a traceback (new-user trial 23). The login view follows a `next` of at most
django.utils.http.MAX_URL_LENGTH (2,048) characters only (url_has_allowed_host_and_scheme; a longer one goes to
LOGIN_REDIRECT_URL), so a longer address is cut to its path (the page without its query: /jobs/), or left out
when the path alone is longer: the user always lands on the login page. The admin (/admin/) redirects to its own
login page the same way (AdminSite: GET /admin/?q=<17,000 characters> answered the generic 400 too).
"""
from __future__ import annotations

from functools import update_wrapper, wraps

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils.http import MAX_URL_LENGTH
from django.views.decorators.cache import never_cache


def login_next(request) -> str:
    """The `next` of the login redirect: the address asked for, its path alone when that is longer than the login
    view follows, or "" (none) when the path is too."""
    full = request.get_full_path()
    if len(full) <= MAX_URL_LENGTH:
        return full
    path = full.split("?", 1)[0]  # get_full_path escapes the path: a "?" in it starts the query
    return path if len(path) <= MAX_URL_LENGTH else ""


def login_redirect(request, login_url: str | None = None) -> HttpResponseRedirect:
    """A redirect to the login page (`login_url`, default LOGIN_URL) with login_next as `next`, or without `next`
    when it is ""."""
    following = login_next(request)
    if not following:
        return HttpResponseRedirect(resolve_url(login_url or settings.LOGIN_URL))
    return redirect_to_login(following, login_url)


def login_required(view):
    """django.contrib.auth.decorators.login_required for the pages (LOGIN_URL on this site), with login_redirect."""
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        return login_redirect(request)
    return wrapped


class AdminSite(admin.AdminSite):
    """The admin site (apps.AdminConfig makes it django.contrib.admin.site): Django's, but a visitor it does not let
    in is sent to its login page by login_redirect, whose `next` the login view follows, not Django's redirect
    carrying the whole address (too long: DisallowedRedirect, the generic 400 and an ERROR traceback)."""

    def admin_view(self, view, cacheable=False):
        checked = super().admin_view(view, cacheable)  # Django's: the permission check, never_cache, csrf_protect

        def inner(request, *args, **kwargs):
            if self.has_permission(request) or request.path == reverse("admin:logout", current_app=self.name):
                return checked(request, *args, **kwargs)
            return login_redirect(request, reverse("admin:login", current_app=self.name))

        inner = update_wrapper(inner, checked)
        return inner if cacheable else never_cache(inner)
