"""New-user trial 26, F9 (first two items): without GPUCTL_API gpuctl said only "cannot reach
http://127.0.0.1:8000: [Errno 111] ..." (not that this is the default because nothing set one), and without a token
only "Authentication credentials were not provided." (not how to give one). Against a stand-in urlopen."""
from __future__ import annotations

import io
import urllib.error
import urllib.request

import pytest

from gpuplatform import cli


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv("GPUCTL_API", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)


def refused(*args, **kwargs):
    raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))


def test_the_default_address_is_said_to_be_the_default(monkeypatch, capsys):
    monkeypatch.setattr(urllib.request, "urlopen", refused)
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err == ("gpuctl: cannot reach http://127.0.0.1:8000: [Errno 111] Connection refused "
                                       "(the default address: GPUCTL_API is not set and no --api given)\n")
    for argv, env in ((["--api", "http://127.0.0.1:8000"], None), ([], "http://127.0.0.1:8000")):
        if env:
            monkeypatch.setenv("GPUCTL_API", env)
        assert cli.main([*argv, "list"]) == 2  # set, even to the same address: no such words
        assert capsys.readouterr().err == "gpuctl: cannot reach http://127.0.0.1:8000: [Errno 111] Connection refused\n"


def unauthorized(request, timeout=None):
    raise urllib.error.HTTPError(request.full_url, 401, "Unauthorized", {}, io.BytesIO(
        b'{"detail": "Authentication credentials were not provided."}'))


def test_no_token_says_how_to_give_one(monkeypatch, capsys):
    monkeypatch.setattr(urllib.request, "urlopen", unauthorized)
    assert cli.main(["--api", "http://gpu.example:8000/api/v1", "list"]) == 1
    assert capsys.readouterr().err == (
        "gpuctl: refused (HTTP 401)\n  detail: Authentication credentials were not provided.\n"
        "  no API token was given: set GPUCTL_TOKEN or pass --token; POST http://gpu.example:8000/api/v1/auth-token/ "
        "with -d username=... --data-urlencode 'password=...' issues one (README, gpuctl), or the admin does\n")
    assert cli.main(["--api", "http://gpu.example:8000", "--token", "abc", "list"]) == 1  # a token sent: refused as is
    assert "no API token was given" not in capsys.readouterr().err
