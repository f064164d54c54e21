"""Authorization matrix: every role x every endpoint x own / other team, as one table.

Roles: platform admin (staff), team admin, member and viewer of team alpha, the node agent (a user in
the `node-agents` group, no team) and anonymous. "own" objects belong to team alpha, "other" ones to
team beta; shared objects (inner queues, nodes, domains, metrics) are "shared". Another team's objects are
invisible (404); a visible object you may not change is 403; anonymous is always 401.
"""
from __future__ import annotations

import pytest

ROLES = ("staff", "team_admin", "member", "viewer", "agent")


def exp(staff, team_admin, member, viewer, agent) -> dict[str, int]:
    return {"staff": staff, "team_admin": team_admin, "member": member, "viewer": viewer, "agent": agent,
            "anonymous": 401}


READ = exp(200, 200, 200, 200, 200)
READ_TEAM = exp(200, 200, 200, 200, 404)  # own team's object
HIDDEN = exp(200, 404, 404, 404, 404)  # other team's object
STAFF_ONLY = lambda ok: exp(ok, 403, 403, 403, 403)  # noqa: E731

NEW_NODE = {"name": "n-new", "flavor": "H100", "cpu_milli": 1000, "memory_mib": 1000,
            "gpus": [{"index": 0, "uuid": "GPU-x", "health": "healthy"}]}
JOB = {"name": "j", "command": "sleep 3600", "roles": [{"tasks": 1, "gpus_per_task": 1}]}

# (id, method, url template, body, etag?, expected status per role)
MATRIX = [
    # reads
    ("me", "get", "/api/v1/me/", None, False, READ),
    ("fragmentation advice", "get", "/api/v1/fragmentation-advice/", None, False, READ),
    ("shape check", "post", "/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 2, "gpus_per_task": 6}]},
     False, exp(200, 200, 200, 200, 403)),
    # another team's queue: 403, as job submission answers (new-user trial 10, F4: it was answered)
    ("shape check other", "post", "/api/v1/shape-check/",
     {"queue": "beta", "roles": [{"tasks": 2, "gpus_per_task": 6}]}, False, exp(200, 403, 403, 403, 403)),
    ("fragmentation act", "post", "/api/v1/fragmentation-advice/act/", {"beneficiary": 999999, "jobs": [1]}, False,
     STAFF_ONLY(400)),
    ("teams list", "get", "/api/v1/teams/", None, False, READ),
    ("team own", "get", "/api/v1/teams/alpha/", None, False, READ_TEAM),
    ("team other", "get", "/api/v1/teams/beta/", None, False, HIDDEN),
    ("memberships list", "get", "/api/v1/memberships/", None, False, READ),
    ("membership own", "get", "/api/v1/memberships/{own_membership}/", None, False, READ_TEAM),
    ("membership other", "get", "/api/v1/memberships/{other_membership}/", None, False, HIDDEN),
    ("queues list", "get", "/api/v1/queues/", None, False, READ),
    ("queue tree", "get", "/api/v1/queues/tree/", None, False, READ),
    ("queue shared", "get", "/api/v1/queues/root/", None, False, READ),
    ("queue own", "get", "/api/v1/queues/alpha/", None, False, READ_TEAM),
    ("queue other", "get", "/api/v1/queues/beta/", None, False, HIDDEN),
    ("quotas list", "get", "/api/v1/quotas/", None, False, READ),
    ("quota own", "get", "/api/v1/quotas/{own_quota}/", None, False, READ_TEAM),
    ("quota other", "get", "/api/v1/quotas/{other_quota}/", None, False, HIDDEN),
    ("domains list", "get", "/api/v1/domains/", None, False, READ),
    ("domain tree", "get", "/api/v1/domains/tree/", None, False, READ),
    ("domain shared", "get", "/api/v1/domains/nvl-a1/", None, False, READ),
    ("nodes list", "get", "/api/v1/nodes/", None, False, READ),
    ("node shared", "get", "/api/v1/nodes/n0/", None, False, READ),
    ("jobs list", "get", "/api/v1/jobs/", None, False, READ),
    ("job own", "get", "/api/v1/jobs/{own_job}/", None, False, READ_TEAM),
    ("job other", "get", "/api/v1/jobs/{other_job}/", None, False, HIDDEN),
    ("events list", "get", "/api/v1/events/", None, False, READ),
    ("cycles list", "get", "/api/v1/scheduler-cycles/", None, False, READ),
    ("cycle shared", "get", "/api/v1/scheduler-cycles/1/", None, False, READ),
    ("cluster metrics series", "get", "/api/v1/cluster-metrics/", None, False, READ),
    ("cluster metrics current", "get", "/api/v1/cluster-metrics/current/", None, False, READ),
    # teams and members
    ("team create", "post", "/api/v1/teams/", {"name": "gamma"}, False, STAFF_ONLY(201)),
    ("membership add own", "post", "/api/v1/memberships/", {"team": "alpha", "user": "spare", "role": "member"},
     False, exp(201, 201, 403, 403, 403)),
    ("membership add other", "post", "/api/v1/memberships/", {"team": "beta", "user": "spare", "role": "member"},
     False, exp(201, 403, 403, 403, 403)),
    ("membership role own", "patch", "/api/v1/memberships/{own_spare}/", {"role": "viewer"}, False,
     exp(200, 200, 403, 403, 404)),
    ("membership role other", "patch", "/api/v1/memberships/{other_spare}/", {"role": "viewer"}, False, HIDDEN),
    ("membership remove own", "delete", "/api/v1/memberships/{own_spare}/", None, False, exp(204, 204, 403, 403, 404)),
    ("membership remove other", "delete", "/api/v1/memberships/{other_spare}/", None, False,
     exp(204, 404, 404, 404, 404)),
    # queues and quotas: platform admins only
    ("queue create", "post", "/api/v1/queues/", {"name": "q-new", "parent": "root"}, False, STAFF_ONLY(201)),
    ("queue update own", "patch", "/api/v1/queues/alpha/", {"weight": 3}, True, STAFF_ONLY(200)),
    ("queue update other", "patch", "/api/v1/queues/beta/", {"weight": 3}, True, STAFF_ONLY(200)),
    ("queue update shared", "patch", "/api/v1/queues/root/", {"weight": 3}, True, STAFF_ONLY(200)),
    ("quota create own", "post", "/api/v1/quotas/", {"queue": "alpha", "flavor": "A100", "quota": 0}, False,
     STAFF_ONLY(201)),
    ("quota create other", "post", "/api/v1/quotas/", {"queue": "beta", "flavor": "A100", "quota": 0}, False,
     STAFF_ONLY(201)),
    ("quota set own", "put", "/api/v1/quotas/{own_quota}/", {"guarantee": 0, "quota": 8, "limit": 16}, True,
     STAFF_ONLY(200)),
    ("quota set other", "put", "/api/v1/quotas/{other_quota}/", {"guarantee": 0, "quota": 8, "limit": 16}, True,
     STAFF_ONLY(200)),
    # nodes: platform admins; register / heartbeat: the agent too
    ("node cordon", "post", "/api/v1/nodes/n0/cordon/", {"reason": "test"}, False, STAFF_ONLY(200)),
    ("node drain", "post", "/api/v1/nodes/n0/drain/", {}, False, STAFF_ONLY(200)),
    ("node uncordon", "post", "/api/v1/nodes/n1/uncordon/", {}, False, STAFF_ONLY(200)),
    ("node register", "post", "/api/v1/nodes/register/", NEW_NODE, False, exp(201, 403, 403, 403, 201)),
    ("node heartbeat", "post", "/api/v1/nodes/n0/heartbeat/", {"gpus": [{"index": 0, "health": "healthy"}]}, False,
     exp(200, 403, 403, 403, 200)),
    # jobs
    ("job submit own", "post", "/api/v1/jobs/", {**JOB, "queue": "alpha"}, False, exp(201, 201, 201, 403, 403)),
    ("job submit other", "post", "/api/v1/jobs/", {**JOB, "queue": "beta"}, False, exp(201, 403, 403, 403, 403)),
    ("job submit other as own team", "post", "/api/v1/jobs/", {**JOB, "queue": "beta", "team": "alpha"}, False,
     exp(400, 400, 400, 403, 403)),
    ("job cancel own", "post", "/api/v1/jobs/{own_job}/cancel/", {}, False, exp(200, 200, 200, 403, 404)),
    ("job cancel other", "post", "/api/v1/jobs/{other_job}/cancel/", {}, False, HIDDEN),
    ("job priority own", "patch", "/api/v1/jobs/{own_job}/", {"priority": 5}, False, exp(200, 200, 403, 403, 404)),
    ("job priority other", "patch", "/api/v1/jobs/{other_job}/", {"priority": 5}, False, HIDDEN),
]


@pytest.fixture
def refs(users, jobs, admin):
    from django.contrib.auth import get_user_model

    from gpuplatform import services
    from gpuplatform.models import Membership, Node, Quota, Team
    from gpuplatform.scheduling import store

    alpha, beta = Team.objects.get(slug="alpha"), Team.objects.get(slug="beta")
    User = get_user_model()
    get_user_model().objects.create_user("spare")
    own_spare = services.add_member(alpha, User.objects.create_user("spare-a"), "member")
    other_spare = services.add_member(beta, User.objects.create_user("spare-b"), "member")
    services.cordon_node(Node.objects.get(name="n1"))
    store.run_cycle_once()  # cycle 1 exists; both jobs start
    return {
        "own_job": jobs["own"].pk, "other_job": jobs["other"].pk,
        "own_membership": Membership.objects.get(user=users["member"]).pk,
        "other_membership": Membership.objects.get(user=users["other"]).pk,
        "own_spare": own_spare.pk, "other_spare": other_spare.pk,
        "own_quota": Quota.objects.get(queue__name="alpha").pk, "other_quota": Quota.objects.get(queue__name="beta").pk,
    }


def _cases():
    for name, method, url, body, etag, expected in MATRIX:
        for role in (*ROLES, "anonymous"):
            yield pytest.param(name, method, url, body, etag, role, expected[role], id=f"{name}-{role}")


@pytest.mark.django_db
@pytest.mark.parametrize("name,method,url,body,etag,role,expected", list(_cases()))
def test_authorization_matrix(name, method, url, body, etag, role, expected, refs, client_for, admin):
    url = url.format(**refs)
    headers = {}
    if etag:
        headers["HTTP_IF_MATCH"] = admin.get(url)["ETag"]  # a current ETag, so only the role decides
    client = client_for(role)
    response = getattr(client, method)(url, body, format="json", **headers) if body is not None \
        else getattr(client, method)(url, **headers)
    assert response.status_code == expected, (name, role, response.content[:300])


@pytest.mark.django_db
def test_lists_hold_only_your_teams_objects(refs, client_for):
    """A member of alpha never sees beta's jobs, queues, quotas, members or job events in any list."""
    member = client_for("member")

    def names(url, key):
        return {row[key] for row in member.get(url).json()["results"]}

    assert names("/api/v1/jobs/", "team") == {"alpha"}
    assert names("/api/v1/queues/", "name") == {"root", "alpha"}
    assert names("/api/v1/quotas/", "queue") == {"root", "alpha"}
    assert names("/api/v1/teams/", "slug") == {"alpha"}
    assert names("/api/v1/memberships/", "team") == {"alpha"}
    events = member.get("/api/v1/events/?limit=500").json()["results"]
    assert refs["other_job"] not in {e["job"] for e in events}
    assert "beta" not in {e["queue"] for e in events}
    assert {q["queue"] for q in member.get("/api/v1/cluster-metrics/current/").json()["queues"]} == {"alpha"}
    staff = client_for("staff")
    assert {r["team"] for r in staff.get("/api/v1/jobs/").json()["results"]} == {"alpha", "beta"}
