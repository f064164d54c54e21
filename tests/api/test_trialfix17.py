"""Findings of new-user trial 16b left open at session 16, and trial 17's, each as the user met them."""
from __future__ import annotations

from datetime import datetime, timezone

from tests.api.conftest import SLEEP

CLOCK = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def _gpus(n: int, skip=()) -> list[dict]:
    return [{"index": i, "uuid": f"GPU-n0-{i}"} for i in range(n) if i not in skip]


def test_a_node_that_reports_a_gpu_fewer_re_registers_and_that_gpu_stays_unhealthy(client_for, users):
    """Trial 16b, F7: a node whose agent re-registered with a GPU fewer (a GPU fallen off the bus, Xid 79, is gone
    from NVML) was answered 409 "still referenced by other objects", naming no field, once any task had ever run on
    that GPU: the node could not register again at all. Now the registration goes through; the GPU that ran tasks
    is kept, unhealthy, with its history (the node's gpu_count still counts it, so the engine never places on it);
    a task still on it is requeued by failure detection; a GPU that never ran anything is removed."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Event, Gpu, Job, Node, Queue
    from gpuplatform.scheduling import store
    from gpuplatform.scheduling.failures import detect_failures

    agent = client_for("agent")
    assert agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus(8)},
                      format="json").status_code in (200, 201)
    for other in ("n1", "n2", "n3"):
        services.cordon_node(Node.objects.get(name=other), reason="this test's jobs go to n0")
    job = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="on-n0",
                              roles=[{"tasks": 1, "gpus_per_task": 2}], submitter=users["member"], submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    held = sorted(Allocation.objects.filter(task__job=job).values_list("gpu__index", flat=True))
    assert len(held) == 2 and Job.objects.get(pk=job.pk).state in Job.LIVE_STATES
    lost = held[0]
    # the node comes back without that GPU, and without GPU 7 (which never ran anything), while the job runs
    again = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus(7, skip={lost})},
                       format="json")
    assert again.status_code in (200, 201), again.content
    rows = {g.index: g for g in Gpu.objects.filter(node__name="n0")}
    assert sorted(rows) == [i for i in range(7)]  # GPU 7 removed; the lost one kept
    assert (rows[lost].health, rows[lost].health_reason.startswith("not reported")) == ("unhealthy", True)
    assert again.json()["gpu_count"] == 7
    event = Event.objects.filter(kind="node_registered").latest("id")
    assert event.data["lost_gpus"] == [lost] and f"kept as unhealthy: gpu{lost}" in event.message
    beat = agent.post("/api/v1/nodes/n0/heartbeat/", {"gpus": [{"index": lost, "health": "healthy"}]}, format="json")
    assert beat.status_code == 200 and Gpu.objects.get(pk=rows[lost].pk).health == "unhealthy"  # trial 17c, G4:
    # a heartbeat does not make a GPU the registration no longer lists healthy again; only a registration does
    detect_failures(CLOCK)
    assert Job.objects.get(pk=job.pk).state in (Job.State.PENDING, Job.State.PREEMPTING)  # requeued off the GPU
    requeued = Event.objects.filter(kind="requeued_after_failure", job=job).latest("id")  # trial 17c, G5: not
    assert "GPU out of service: not reported" in requeued.message and "ECC" not in requeued.message  # "ECC / XID"
    # the GPU comes back: healthy again, with its history
    back = agent.post("/api/v1/nodes/register/", {"name": "n0", "flavor": "H100", "gpus": _gpus(8)}, format="json")
    assert back.status_code in (200, 201) and back.json()["gpu_count"] == 8
    assert Gpu.objects.get(node__name="n0", index=lost).health == "healthy"
    assert Allocation.objects.filter(gpu__node__name="n0", gpu__index=lost).exists()


def test_a_migratable_job_must_be_preemptible(client_for):
    """Trial 16, F7: `migratable: true` with `preemptible: false` was accepted, and the job was never moved (the
    rescheduler moves only preemptible jobs: a move is a preemption). Refused on `migratable`, as `interruptible`
    with preemptible false is; either alone, or both true, is accepted."""
    member = client_for("member")
    body = {"name": "m", "queue": "alpha", "command": SLEEP, "roles": [{"tasks": 1, "gpus_per_task": 1}]}
    refused = member.post("/api/v1/jobs/", {**body, "migratable": True, "preemptible": False}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["migratable"]
    assert "must be preemptible" in refused.json()["migratable"][0]
    for extra in ({"migratable": True}, {"preemptible": False}, {"migratable": True, "preemptible": True}):
        assert member.post("/api/v1/jobs/", {**body, **extra}, format="json").status_code == 201, extra


def test_agent_token_never_turns_a_persons_account_into_a_node_agent(users):
    """Trial 17, F9: `manage.py agent_token n0 --user admin` printed a token and made the superuser's password
    unusable, revoked every API token it had and put it in node-agents: the only superuser was locked out. The
    same for a team member. Such a user is refused, naming it; a new user or an existing node agent's is served; a
    node name no node can register under is refused too."""
    import io

    import pytest
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command

    from gpuplatform.services import issue_api_token

    User = get_user_model()
    root = User.objects.create_superuser("root", password="pw-root-123")
    keep, _ = issue_api_token(root)
    for person in ("root", "mike", "admin"):  # the superuser, a team member, a staff user
        with pytest.raises(CommandError, match="is a person's account"):
            call_command("agent_token", "n0", "--user", person, stdout=io.StringIO())
    root.refresh_from_db()
    assert root.has_usable_password() and not root.groups.filter(name="node-agents").exists()
    assert User.objects.get(username="mike").has_usable_password()
    from knox.auth import TokenAuthentication

    assert TokenAuthentication().authenticate_credentials(keep.encode())[0] == root  # its token still works
    with pytest.raises(CommandError, match="nodes"):
        call_command("agent_token", "bad name", stdout=io.StringIO())
    for name in (" ", "a b", "x" * 151, "ag\x01x", ""):  # trial 17c, G1: Django's username rule
        with pytest.raises(CommandError, match="username"):
            call_command("agent_token", "n0", "--user", name, stdout=io.StringIO())
    assert not User.objects.filter(username__in=[" ", "a b", "ag\x01x"]).exists()
    out = io.StringIO()
    call_command("agent_token", "n0", stdout=io.StringIO())  # a new user, agent-n0
    call_command("agent_token", "n0", "--user", "node-agent", stdout=out)  # an existing node agent's user
    assert len(out.getvalue().strip()) >= 32 and User.objects.get(username="agent-n0").groups.filter(
        name="node-agents").exists()
    call_command("agent_token", "*", stdout=io.StringIO())  # every node


def test_a_blank_utilization_filter_is_a_400_naming_it(admin):
    """Trial 17c, G15: /api/v1/utilization/?team= answered the whole cluster, where the lists answer a blank filter
    with a 400 naming it (trial 17b, F12)."""
    for param in ("team", "queue", "flavor", "scope", "step"):
        for value in ("", " "):
            r = admin.get("/api/v1/utilization/", {param: value})
            assert r.status_code == 400 and list(r.json()) == [param], (param, value, r.content)
            assert r.json()[param][0].startswith("must not be empty")  # the one wording (trial 20, F3)
    assert admin.get("/api/v1/utilization/", {"team": "alpha"}).status_code == 200
