"""Issue #12, trust: one shared node-agent token could report any node's GPUs unhealthy (requeueing
another team's job) and register nodes the scheduler filled at once. Now each agent token is scoped to its
nodes (models.NodeAgentScope): it heartbeats, reads assignments and reports for those only; a node its
scope does not name joins cordoned until an admin accepts it (uncordon); a bootstrap token naming nodes
lets them join ready (the local demo's agents)."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Event, Gpu, Node, NodeAgentScope

pytestmark = pytest.mark.django_db

INVENTORY = {"flavor": "H100", "gpus": [{"index": i} for i in range(2)]}


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def n0_agent(cluster):
    return agent(services.issue_node_agent_token(["n0"]))


def test_per_node_token_acts_for_its_node_only(n0_agent):
    assert n0_agent.post("/api/v1/nodes/n0/heartbeat/", {"gpus": []}, format="json").status_code == 200
    bad = {"gpus": [{"index": 0, "health": "unhealthy", "health_reason": "forged XID"}]}
    for path, body in (("/api/v1/nodes/n1/heartbeat/", bad), ("/api/v1/nodes/n1/reports/", {"tasks": [], "logs": []})):
        r = n0_agent.post(path, body, format="json")
        assert r.status_code == 403 and "n1" in r.json()["detail"]
    assert n0_agent.get("/api/v1/nodes/n1/assignments/").status_code == 403
    assert n0_agent.get("/api/v1/nodes/n0/assignments/").status_code == 200
    assert not Gpu.objects.filter(node__name="n1", health="unhealthy").exists()


def test_an_agent_cannot_re_register_another_agents_node(n0_agent):
    r = n0_agent.post("/api/v1/nodes/register/", {"name": "n2", **INVENTORY}, format="json")
    assert r.status_code == 403
    assert Gpu.objects.filter(node__name="n2").count() == 8  # untouched


def test_a_node_its_token_does_not_name_joins_cordoned_until_an_admin_accepts_it(n0_agent, client_for):
    r = n0_agent.post("/api/v1/nodes/register/", {"name": "rogue", **INVENTORY}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "cordoned"
    assert Event.objects.filter(kind="node_awaiting_acceptance", node__name="rogue").exists()
    # its own agent keeps reporting for it meanwhile
    assert n0_agent.post("/api/v1/nodes/rogue/heartbeat/", {"gpus": []}, format="json").status_code == 200
    assert Node.objects.get(name="rogue").state == "cordoned"
    # the admin accepts it
    r = client_for("staff").post("/api/v1/nodes/rogue/uncordon/", {"reason": "accepted"}, format="json")
    assert r.status_code == 200 and Node.objects.get(name="rogue").state == "ready"


def test_a_bootstrap_token_naming_nodes_lets_them_join_ready(cluster):
    boot = agent(services.issue_node_agent_token(["new-0", "new-1"], username="bootstrap"))
    for name in ("new-0", "new-1"):
        r = boot.post("/api/v1/nodes/register/", {"name": name, **INVENTORY}, format="json")
        assert r.status_code == 201 and r.json()["state"] == "ready"
    r = boot.post("/api/v1/nodes/register/", {"name": "new-2", **INVENTORY}, format="json")
    assert r.json()["state"] == "cordoned"  # not named: awaits acceptance


def test_an_unscoped_agent_user_has_no_node(users, cluster):
    from django.contrib.auth.models import Group
    from gpuplatform.services import issue_api_token

    from gpuplatform.api.permissions import NODE_AGENT_GROUP

    u = users["member"].__class__.objects.create_user("old-shared-agent")
    u.groups.add(Group.objects.get(name=NODE_AGENT_GROUP))
    old = agent(issue_api_token(u)[0])
    assert old.post("/api/v1/nodes/n3/heartbeat/", {"gpus": []}, format="json").status_code == 403
    assert old.post("/api/v1/nodes/register/", {"name": "fresh", **INVENTORY}, format="json").json()["state"] == "cordoned"
    assert NodeAgentScope.objects.get(user=u).nodes == ["fresh"]


def test_agent_token_command_prints_a_scoped_token(cluster, capsys):
    call_command("agent_token", "n3")
    token = capsys.readouterr().out.strip()
    assert agent(token).post("/api/v1/nodes/n3/heartbeat/", {"gpus": []}, format="json").status_code == 200
    assert agent(token).post("/api/v1/nodes/n2/heartbeat/", {"gpus": []}, format="json").status_code == 403
