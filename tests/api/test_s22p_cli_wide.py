"""gpuctl's job table does not cut the reason at a fixed width (new-user trial 22, G4): piped it is never cut, on a
terminal it fits the terminal's width (COLUMNS), and -o wide / --wide never cut it. Against a scripted API."""
from __future__ import annotations

import io

import pytest

from gpuplatform import cli

API = ["--api", "http://gpu.example:8000", "--token", "t"]
REASON = ("pending: the gang's task worker[0] exited with code 1; attempt 1 retries at 2026-12-04T04:20:40Z "
          "(backoff 60 s, 2 restarts left)")
JOB = {"id": 7, "name": "train", "team": "demo", "queue": "demo", "state": "pending", "gpus": 1, "priority": 0,
       "pending_reason": REASON, "position": 1, "nodes": []}


class FakeApi:
    def __init__(self, base, token, timeout=30.0):
        pass

    def request(self, method, path, body=None, headers=None):
        return self.get(path)

    def get(self, path, **params):
        if path == "/api/v1/jobs/":
            return {"count": 1, "next": None, "results": [JOB]}, {}
        return JOB, {}


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def fake_api(monkeypatch):
    monkeypatch.setattr(cli, "Client", FakeApi)


def run(monkeypatch, argv, *, tty: bool, columns: int | None = None) -> list[str]:
    out = Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(API + argv) == 0
    return out.getvalue().splitlines()


@pytest.mark.parametrize("argv", [["list"], ["get", "7"]])
def test_piped_table_is_never_cut(monkeypatch, argv):
    lines = run(monkeypatch, argv, tty=False, columns=80)  # COLUMNS says 80, but a pipe reads whole lines
    assert lines[1].endswith("#1 " + REASON)


@pytest.mark.parametrize("argv", [["list"], ["get", "7"]])
def test_wide_terminal_shows_the_whole_reason(monkeypatch, argv):
    lines = run(monkeypatch, argv, tty=True, columns=250)
    assert lines[1].endswith("retries at 2026-12-04T04:20:40Z (backoff 60 s, 2 restarts left)")
    assert max(len(line) for line in lines) <= 250


def test_narrow_terminal_cuts_the_reason_to_its_width_and_says_so(monkeypatch):
    lines = run(monkeypatch, ["list"], tty=True, columns=100)
    assert all(len(line) <= 100 for line in lines) and len(lines[1]) == 100
    assert lines[1].endswith("...") and "#1 pending: the gang's task" in lines[1]


@pytest.mark.parametrize("flag", [["-o", "wide"], ["--wide"], ["--output", "wide"]])
def test_wide_option_never_cuts_even_on_a_narrow_terminal(monkeypatch, flag):
    lines = run(monkeypatch, ["list", *flag], tty=True, columns=40)
    assert lines[1].endswith(REASON)
    lines = run(monkeypatch, ["get", "7", *flag], tty=True, columns=40)
    assert lines[1].endswith(REASON)


def test_output_json_is_the_apis_answer(monkeypatch):
    import json

    body = "\n".join(run(monkeypatch, ["get", "7", "-o", "json"], tty=True, columns=40))
    assert json.loads(body) == JOB
