"""API test world: the small platform cluster (4 x 8 H100 in two NVLink domains under one leaf; queues
root > alpha (team alpha), beta (team beta)), one user per role, a token client per user."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from gpuplatform.services import issue_api_token
from rest_framework.test import APIClient

from tests.platform.helpers_platform import small_spec

ROLES = ("staff", "team_admin", "member", "viewer", "agent", "anonymous")
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


@pytest.fixture(autouse=True)
def _fast_and_fresh(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()  # throttle counters
    yield
    cache.clear()


@pytest.fixture
def cluster(db):
    from gpuplatform import services

    services.load_cluster_spec(small_spec())
    return small_spec()


@pytest.fixture
def users(cluster):
    """role -> User (None for anonymous). team_admin / member / viewer are in team alpha; `other` is a
    member of team beta (the owner of the 'other team' objects)."""
    from gpuplatform import services
    from gpuplatform.models import Team
    from gpuplatform.api.permissions import NODE_AGENT_GROUP

    User = get_user_model()
    alpha, beta = Team.objects.get(name="alpha"), Team.objects.get(name="beta")
    out = {"staff": User.objects.create_user("admin", password="pw", is_staff=True)}
    for role, name, team_role in (("team_admin", "alice", "admin"), ("member", "mike", "member"),
                                  ("viewer", "vera", "viewer")):
        out[role] = User.objects.create_user(name, password="pw")
        services.add_member(alpha, out[role], team_role)
    out["other"] = User.objects.create_user("bob", password="pw")
    services.add_member(beta, out["other"], "member")
    out["other_admin"] = User.objects.create_user("bea", password="pw")
    services.add_member(beta, out["other_admin"], "admin")
    out["agent"] = User.objects.create_user("node-agent", password="pw")
    out["agent"].groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
    from gpuplatform.models import NodeAgentScope

    NodeAgentScope.objects.create(user=out["agent"], nodes=["*"])  # trusted for every node (scoped ones: test_agent_scope)
    out["anonymous"] = None
    return out


@pytest.fixture
def client_for(users):
    """client_for(role) -> an APIClient authenticated with that user's token (anonymous: none)."""
    def make(role: str) -> APIClient:
        client = APIClient()
        user = users[role]
        if user is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
        return client
    return make


@pytest.fixture
def admin(client_for) -> APIClient:
    return client_for("staff")


@pytest.fixture
def jobs(users):
    """One pending job per team: {'own': alpha's, 'other': beta's}."""
    from gpuplatform import services
    from gpuplatform.models import Queue

    own = services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name="alpha-job",
                              roles=[{"tasks": 1, "gpus_per_task": 2}], submitter=users["member"])
    other = services.submit_job(command=SLEEP, team=Queue.objects.get(name="beta").team, queue="beta", name="beta-job",
                                roles=[{"tasks": 1, "gpus_per_task": 2}], submitter=users["other"])
    return {"own": own, "other": other}
