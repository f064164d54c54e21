"""Trial 19 (left from session 19): the demo users' password was on the command line (`make demo DEMO_ARGS="--password
..."`, and every federation worker got `--password <pw>` even when the user gave none), which every user of the
machine reads with `ps`. DEMO_PASSWORD in the environment sets it instead; --password still works, with a warning.
Also F18: a demo run marks where the GPU-hour ledger's records start (workload_reset)."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.frontend.test_demo import tiny_importers  # noqa: F401  (fixture)

RUN = ("demo", "--no-server", "--duration-seconds", "0.5", "--start-day", "0", "--tick", "0.2")


@pytest.mark.django_db
def test_demo_password_from_the_environment_and_a_warning_for_the_command_line(tiny_importers, monkeypatch):
    from gpuplatform.models import Event

    monkeypatch.setenv("DEMO_PASSWORD", "pw-from-env-1")
    out, err = io.StringIO(), io.StringIO()
    call_command(*RUN, stdout=out, stderr=err)
    assert "pw-from-env-1" in out.getvalue() and "process list" not in err.getvalue()
    assert get_user_model().objects.get(username="admin").check_password("pw-from-env-1")
    # the run marked where the ledger's records start (trial 19, F18)
    assert Event.objects.filter(kind="workload_reset").count() == 1
    monkeypatch.delenv("DEMO_PASSWORD")
    out, err = io.StringIO(), io.StringIO()
    call_command(*RUN, "--password", "pw-argv-2", stdout=out, stderr=err)
    assert "--password is on this process's command line" in err.getvalue()
    assert get_user_model().objects.get(username="admin").check_password("pw-argv-2")
    assert Event.objects.filter(kind="workload_reset").count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_demo_password_is_refused_before_anything(value, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", value)
    out = io.StringIO()
    with pytest.raises(CommandError, match="DEMO_PASSWORD must not be empty"):
        call_command(*RUN, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""

