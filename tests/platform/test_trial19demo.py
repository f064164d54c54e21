"""New-user trial 19: the local demo's restart and its agents' environment.

F13: `make demo-local` reset queue demo's H200 quota on every start and died (raw traceback) on the root-quota-sum
rule once an admin had given a second root queue a quota; README promises a restart keeps a changed quota.
F14: every job of `make demo-local DEMO_ARGS="--password ..."` inherited DEMO_ARGS / MAKEFLAGS / MAKEOVERRIDES,
i.e. the admin password, in its environment."""
from __future__ import annotations

import pytest


def _nodes(count=2, gpus=2):
    from gpuplatform import services

    for n in range(count):
        services.register_node(f"local-{n}", flavor="H200",
                               gpus=[{"index": i, "uuid": f"GPU-{n}-{i}"} for i in range(gpus)])


def _quota(queue_name):
    from gpuplatform.models import Quota

    row = Quota.objects.filter(queue__name=queue_name, flavor="H200").first()
    return None if row is None else (row.guarantee, row.quota, row.limit)


@pytest.mark.django_db
def test_a_restart_keeps_the_stored_quota_and_survives_a_second_root_queue():
    """F13's steps: first run (demo 4/4), admin lowers demo to 2/4 and adds root queue ml2 with quota 2
    (2 + 2 = the cluster's 4 GPUs); the next start neither crashes nor puts demo back to 4."""
    from gpuplatform import services
    from gpuplatform.management.commands.demo import ensure_demo_team
    from gpuplatform.models import Queue

    _nodes()
    ensure_demo_team("pw", 4)
    assert _quota("demo") == (0, 4, 4)
    services.set_quota(Queue.objects.get(name="demo"), "H200", 0, 2, 4)
    ml2 = services.create_team("ml2")
    services.create_queue("ml2", team=ml2, quotas={"H200": (0, 2, 4)})
    ensure_demo_team("pw", 4)  # raised ValidationError (root quotas would sum to 6): no server
    assert _quota("demo") == (0, 2, 4)  # the quota changed in the last run is kept
    assert _quota("ml2") == (0, 2, 4)


@pytest.mark.django_db
def test_a_default_quota_the_rules_refuse_is_a_warning_not_a_crash():
    """A demo queue without an H200 quota (an admin removed it) gets the default only where the rules allow it;
    otherwise the demo still starts and says why the quota was not set."""
    from gpuplatform import services
    from gpuplatform.management.commands.demo import ensure_demo_team
    from gpuplatform.models import Quota

    _nodes()
    ml2 = services.create_team("ml2")
    services.create_queue("ml2", team=ml2, quotas={"H200": (0, 4, 4)})
    warnings = []
    team = ensure_demo_team("pw", 4, warn=warnings.append)  # first run: the queue is created without the quota
    assert team.name == "demo" and _quota("demo") is None
    assert len(warnings) == 1 and "quota" in warnings[0] and "8, above the cluster's 4 H200" in warnings[0]
    Quota.objects.filter(queue__name="ml2").update(quota=2)
    warnings.clear()
    ensure_demo_team("pw", 4, warn=warnings.append)  # 2 + 4 = 6 > 4: refused again, a warning, no crash
    assert _quota("demo") is None and len(warnings) == 1
    Quota.objects.filter(queue__name="ml2").update(quota=0)
    ensure_demo_team("pw", 4, warn=warnings.append)
    assert _quota("demo") == (0, 4, 4)


MAKE_ENV = {"PATH": "/bin", "HOME": "/home/u", "DEMO_ARGS": "--port 8119 --password pw19secret",
            "MAKEFLAGS": " -- DEMO_ARGS=--port\\ 8119\\ --password\\ pw19secret", "MFLAGS": "-s",
            "MAKEOVERRIDES": "${-*-command-variables-*-}",
            "MAKELEVEL": "1", "MAKE_TERMOUT": "/dev/pts/1", "MAKE_TERMERR": "/dev/pts/1",
            "DEMO_DB_VARIABLE": "DEMO_LOCAL_DB"}


def test_task_env_strips_make_and_demo_variables():
    """F14: MAKEFLAGS / MAKEOVERRIDES / DEMO_ARGS held the admin password and reached every job."""
    from gpuplatform.agent.executor import task_env

    env = task_env({"GPUPLATFORM_JOB_ID": "42"}, MAKE_ENV)
    assert "pw19secret" not in repr(env), env
    assert not {"DEMO_ARGS", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "MAKE_TERMOUT", "MAKE_TERMERR",
                "DEMO_DB_VARIABLE"} & set(env)
    assert env["PATH"] == "/bin" and env["HOME"] == "/home/u" and env["GPUPLATFORM_JOB_ID"] == "42"
    # a job that sets one of these itself (its `env`) keeps it
    assert task_env({"MAKEFLAGS": "-j4"}, MAKE_ENV)["MAKEFLAGS"] == "-j4"


def test_the_local_demo_starts_its_agents_without_make_and_demo_variables(tmp_path, monkeypatch):
    """F14, better: `make demo-local`'s agents do not carry them at all (an agent of an older version, or a task
    whose env the agent did not build, has nothing to pass on)."""
    from gpuplatform.agent import local

    for name, value in MAKE_ENV.items():
        monkeypatch.setenv(name, value)
    seen = []

    class FakePopen:
        def __init__(self, argv, env=None, **kwargs):
            seen.append(env)

        def poll(self):
            return None

    monkeypatch.setattr(local.subprocess, "Popen", FakePopen)
    local.start_agents("http://127.0.0.1:1", "tok", 2, root=tmp_path / "agents")
    assert len(seen) == 2
    for env in seen:
        assert "pw19secret" not in repr(env)
        assert not {"DEMO_ARGS", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "DEMO_DB_VARIABLE"} & set(env)
        assert env["GPUPLATFORM_AGENT_TOKEN"] == "tok" and env["HOME"] == "/home/u"
