"""gpuctl against a live server: submit, list, get, cancel, set-quota (with ETag), refusals."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpuctl(live_server, users, capsys):
    from rest_framework.authtoken.models import Token

    from gpuplatform.cli import main

    def run(role, *argv):
        token = Token.objects.get_or_create(user=users[role])[0].key
        code = main(["--api", live_server.url, "--token", token, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_submit_list_get_cancel(gpuctl):
    code, out, _ = gpuctl("member", "--json", "submit", "--queue", "alpha", "--name", "train", "--tasks", "2",
                          "--gpus", "8", "--min-available", "2")
    assert code == 0
    job = json.loads(out)
    assert (job["name"], job["gpus"], job["state"]) == ("train", 16, "pending")
    code, out, _ = gpuctl("member", "list", "--state", "pending")
    assert code == 0 and "train" in out and "alpha" in out and out.splitlines()[0].startswith("ID")
    code, out, _ = gpuctl("member", "get", str(job["id"]))
    assert code == 0 and "train" in out
    code, out, _ = gpuctl("member", "cancel", str(job["id"]), "--reason", "test")
    assert code == 0 and "cancelled" in out
    code, _, err = gpuctl("member", "cancel", str(job["id"]))
    assert code == 1 and "state:" in err


def test_refusals_name_the_field(gpuctl):
    code, _, err = gpuctl("member", "submit", "--queue", "alpha", "--name", "x", "--tasks", "4", "--min-available", "5")
    assert code == 1 and "roles[0].min_available" in err
    code, _, err = gpuctl("viewer", "submit", "--queue", "alpha", "--name", "x")
    assert code == 1 and "HTTP 403" in err


def test_set_quota_creates_then_updates(gpuctl):
    from gpuplatform.models import Quota

    code, out, _ = gpuctl("staff", "set-quota", "alpha", "A100", "--quota", "0", "--limit", "4")
    assert code == 0 and "alpha/A100: guarantee 0, quota 0, limit 4" in out
    code, out, _ = gpuctl("staff", "set-quota", "alpha", "H100", "--guarantee", "2", "--quota", "12", "--limit", "24")
    assert code == 0
    assert Quota.objects.filter(queue__name="alpha", flavor="H100").values_list("guarantee", "quota", "limit").get() \
        == (2, 12, 24)
    code, _, err = gpuctl("staff", "set-quota", "alpha", "H100", "--quota", "40")
    assert code == 1 and "quota:" in err
    code, _, err = gpuctl("member", "set-quota", "alpha", "H100", "--quota", "8")
    assert code == 1 and "HTTP 403" in err


def test_unreachable_api_exits_2(capsys):
    from gpuplatform.cli import main

    assert main(["--api", "http://127.0.0.1:9", "list"]) == 2


def test_bad_file_and_bad_address_are_clear_errors(tmp_path, capsys):
    from gpuplatform.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for argv, expected in ((["--api", "http://127.0.0.1:9", "submit", "--file", str(bad)], "not valid JSON"),
                           (["--api", "http://127.0.0.1:9", "submit", "--file", str(tmp_path / "none.json")],
                            "cannot read")):
        try:
            main(argv)
        except SystemExit as exc:
            assert expected in str(exc)
        else:
            raise AssertionError("expected SystemExit")
    assert main(["--api", "not-a-url", "list"]) == 2
    assert "must start with http" in capsys.readouterr().err
