"""New-user trial 26, F4: gpuctl printed a Python traceback for a bad --api address or token (an unclosed IPv6
bracket, a port that is not a number, a space in the URL, a newline in the token) and "Connection refused" for port
99999. Each is now one line, "gpuctl: <where it came from> ...: <the rule>", exit 2 (bad usage), before any request
is sent, whichever the command; the token itself is never printed."""
from __future__ import annotations

import urllib.request

import pytest

from gpuplatform import cli


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a request was sent with a bad address or token")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.delenv("GPUCTL_API", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)


@pytest.mark.parametrize("api, words", [
    ("http://[::1", "--api 'http://[::1': not a valid URL (Invalid IPv6 URL; an IPv6 address is written in brackets"),
    ("http://127.0.0.1:abc", "--api 'http://127.0.0.1:abc': the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:99999", "--api 'http://127.0.0.1:99999': the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:0", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:8271/ x", "a URL is printable ASCII with no spaces (percent-encode the rest), not a space "
                                 "at character 23"),
    ("http://127.0.0.1:8271/\x01", "not the control character U+0001 at character 23"),
    ("http://127.0.0.1:8271/\u00e4", "not the non-ASCII character U+00E4 at character 23"),
    ("http://", "--api 'http://': the URL has no host (e.g. http://127.0.0.1:8000)"),
])
@pytest.mark.parametrize("command", [["list"], ["get", "3"], ["logs", "3", "--follow"], ["cancel", "3"]])
def test_a_bad_api_address_is_one_line_naming_the_option_and_the_rule(capsys, api, words, command):
    assert cli.main(["--api", api, *command]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl: --api ") and words in err and err.count("\n") == 1, err


def test_the_address_from_the_environment_is_named_as_such(capsys, monkeypatch):
    monkeypatch.setenv("GPUCTL_API", "http://[::1")
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err.startswith("gpuctl: GPUCTL_API 'http://[::1': not a valid URL")
    monkeypatch.setenv("GPUCTL_API", "127.0.0.1:8000")
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err == ("gpuctl: GPUCTL_API '127.0.0.1:8000': the API address must start with http:// "
                                       "or https:// (e.g. http://127.0.0.1:8000; set GPUCTL_API or pass --api)\n")


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("token, what", [("a\nb", "a newline at character 2"), ("ab c", "a space at character 3"),
                                         ("t\u00f6k\u00e9n", "the non-ASCII character U+00F6 at character 2"),
                                         ("x\u2603", "the non-ASCII character U+2603 at character 2")])
def test_a_token_that_cannot_be_sent_is_one_line_and_never_shown(capsys, monkeypatch, flag, token, what):
    if flag:
        argv, source = ["--token", token], "--token"
    else:
        monkeypatch.setenv("GPUCTL_TOKEN", token)
        argv, source = [], "GPUCTL_TOKEN"
    assert cli.main(["--api", "http://127.0.0.1:8000", *argv, "list"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gpuctl: {source}: a token is printable ASCII with no spaces (as POST /api/v1/auth-token/ issues "
                   f"them), not {what}\n")
    assert token not in err
