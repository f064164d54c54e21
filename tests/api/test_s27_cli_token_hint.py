"""A token gpuctl sends that the server refuses (session 27): revoked, expired, made up or mistyped, or one issued by
another server or an earlier demo database got only the server's words ("Invalid token."), not what to do. Now one
more line says where the token came from (--token or GPUCTL_TOKEN), why a server refuses one and README's sign-in
line; the exit status stays 1 and the token is never shown. The same for every command (list, queues, nodes), against
a live server; no token at all still gives the no-token hint."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

MADE_UP = "0123456789abcdef" * 4  # the shape of an issued token, issued by no one


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv("GPUCTL_API", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)


@pytest.fixture
def gpuctl(live_server, capsys, monkeypatch):
    """gpuctl(token, source, *argv) -> (status, stdout, stderr), the token passed as `source` says: "--token",
    "GPUCTL_TOKEN" or None (no token)."""
    from gpuplatform.cli import main

    def run(token, source, *argv):
        monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
        flag = []
        if source == "--token":
            flag = ["--token", token]
        elif source == "GPUCTL_TOKEN":
            monkeypatch.setenv("GPUCTL_TOKEN", token)
        code = main(["--api", live_server.url, *flag, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def revoked(user) -> str:
    from gpuplatform.services import issue_api_token, revoke_api_tokens

    token = issue_api_token(user)[0]
    assert revoke_api_tokens(user) == 1
    return token


def expired(user) -> str:
    from knox.models import AuthToken
    from django.utils import timezone

    from gpuplatform.services import issue_api_token

    token = issue_api_token(user)[0]
    AuthToken.objects.filter(user=user).update(expiry=timezone.now() - timedelta(minutes=1))
    return token


def hint(where: str, url: str) -> str:
    return (f"  the server refused the token {where}: revoked, expired, or issued by another server or an earlier "
            f"demo database; a new one: curl -X POST {url}/api/v1/auth-token/ -d username=... --data-urlencode "
            f"'password=...' (README, gpuctl), or the admin issues one\n")


@pytest.mark.parametrize("source, where", [("--token", "given with --token"), ("GPUCTL_TOKEN", "in GPUCTL_TOKEN")])
def test_a_refused_token_says_where_it_came_from_and_how_to_get_one(gpuctl, users, live_server, source, where):
    from gpuplatform.services import issue_api_token

    for kind, token in (("revoked", revoked(users["member"])), ("made up", MADE_UP),
                        ("expired", expired(users["other"]))):
        for command in ("list", "queues", "nodes"):
            code, out, err = gpuctl(token, source, command)
            assert (code, out) == (1, ""), (kind, command)
            assert err == ("gpuctl: refused (HTTP 401)\n  detail: Invalid token.\n" + hint(where, live_server.url)), \
                (kind, command)
            assert token not in err
    good = issue_api_token(users["member"])[0]  # a token the server takes: no such line
    assert gpuctl(good, source, "queues")[::2] == (0, "")


def test_the_address_in_the_hint_is_the_servers_without_api_v1(gpuctl, users, live_server):
    code, out, err = gpuctl(MADE_UP, "--token", "--api", f"{live_server.url}/api/v1/", "list")
    assert code == 1
    assert err.endswith(hint("given with --token", live_server.url))


def test_no_token_still_gets_the_no_token_hint(gpuctl, users, live_server):
    for command in ("list", "queues"):
        code, out, err = gpuctl(None, None, command)
        assert (code, out) == (1, "")
        assert err == (
            "gpuctl: refused (HTTP 401)\n  detail: Authentication credentials were not provided.\n"
            f"  no API token was given: set GPUCTL_TOKEN or pass --token; POST {live_server.url}/api/v1/auth-token/ "
            "with -d username=... --data-urlencode 'password=...' issues one (README, gpuctl), or the admin does\n")
        assert "refused the token" not in err


def test_the_hints_sign_in_line_is_readmes():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert ("curl -s -X POST $GPUCTL_API/api/v1/auth-token/ -d username=admin --data-urlencode 'password=...'"
            in readme)
