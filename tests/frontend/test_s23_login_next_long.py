"""New-user trial 23: `GET /jobs/?q=<17,000 characters>` without a session answered Django's generic "Bad Request
(400)" page and logged an ERROR traceback (DisallowedRedirect: the login redirect's `next=` past 16,384
characters). The sign-in redirect keeps `next` to what the login view follows (2,048 characters): a longer
address is cut to its path, or left out; the user lands on the login page, nothing is logged as an error."""
from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

import pytest

pytestmark = pytest.mark.django_db


def _next(response) -> list[str]:
    return parse_qs(urlsplit(response["Location"]).query).get("next", [])


@pytest.mark.parametrize("page", ["/jobs/", "/", "/utilization/"])
@pytest.mark.parametrize("length", [17_000, 3_000])
def test_a_long_address_without_a_session_lands_on_the_login_page(client, world, caplog, page, length):
    client.raise_request_exception = False
    with caplog.at_level(logging.WARNING):
        r = client.get(f"{page}?q=" + "a" * length)
    assert r.status_code == 302, (r.status_code, r.content[:200])
    assert urlsplit(r["Location"]).path == "/accounts/login/" and _next(r) == [page]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text
    assert client.get(r["Location"]).status_code == 200  # the login page itself


def test_a_path_too_long_to_follow_is_left_out_and_a_short_address_is_kept_whole(client, world):
    client.raise_request_exception = False
    r = client.get("/docs/" + "x" * 3_000 + "/?q=1")  # a path alone longer than the login view follows
    assert r.status_code == 302 and r["Location"] == "/accounts/login/", r.get("Location", r.status_code)
    r = client.get("/jobs/?state=pending&q=abc")
    assert r.status_code == 302 and _next(r) == ["/jobs/?state=pending&q=abc"]


def test_signing_in_from_the_cut_next_goes_to_the_page(client, world):
    r = client.get("/jobs/?q=" + "a" * 17_000)
    login = client.post(r["Location"], {"username": world["admin"].username, "password": "pw-admin-123"})
    assert login.status_code == 302 and login["Location"] == "/jobs/"


@pytest.mark.parametrize("page", ["/admin/", "/admin/gpuplatform/job/"])
@pytest.mark.parametrize("length", [17_000, 3_000])
def test_the_admin_sends_a_long_address_to_its_login_page_the_same_way(client, world, caplog, page, length):
    """GET /admin/?q=<17,000 characters> without a session answered the generic 400 (the admin's own redirect
    carried the whole address: DisallowedRedirect, an ERROR traceback): it lands on the admin's login page with
    `next` cut to the path, by the pages' login_redirect (login.AdminSite)."""
    client.raise_request_exception = False
    with caplog.at_level(logging.WARNING):
        r = client.get(f"{page}?q=" + "a" * length)
    assert r.status_code == 302, (r.status_code, r.content[:200])
    assert urlsplit(r["Location"]).path == "/admin/login/" and _next(r) == [page], r["Location"][:200]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text
    assert client.get(r["Location"]).status_code == 200  # the admin's login page
    login = client.post(r["Location"], {"username": world["admin"].username, "password": "pw-admin-123"})
    assert login.status_code == 302 and login["Location"] == page


def test_the_admin_keeps_a_short_address_whole_and_lets_staff_in(client, world):
    r = client.get("/admin/gpuplatform/job/?state__exact=pending")
    assert r.status_code == 302 and urlsplit(r["Location"]).path == "/admin/login/"
    assert _next(r) == ["/admin/gpuplatform/job/?state__exact=pending"]
    client.force_login(world["alice"])  # signed in, not staff: the admin's login page too
    r = client.get("/admin/?q=" + "a" * 17_000)
    assert r.status_code == 302 and _next(r) == ["/admin/"]
    client.force_login(world["admin"])
    assert client.get("/admin/?q=" + "a" * 17_000).status_code == 200
    assert "no-cache" in client.get("/admin/")["Cache-Control"]  # Django's never_cache kept
