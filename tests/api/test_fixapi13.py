"""New-user trial 13 findings on the API (notes/fixapi13.md): node names under the one name rule (F2), the
auth-token endpoint as strict as the rest of the API (F3), log chunks at absurd offsets (F4), heartbeat clocks
(F13), the requeue wording (F9), both spellings of a task in the logs API (F8), set-quota (F16) and quota
flavors / queue types (F11)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from gpuplatform import services
from gpuplatform.models import Node
from gpuplatform.names import name_error

BAD_NODE_NAMES = ["../../etc/x y", "a/b", "x y", "nöde", ".hidden", "-dash", "a" * 201]
INVENTORY = {"flavor": "H200", "gpus": [{"index": 0}]}


# --- F2: node names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BAD_NODE_NAMES)
def test_registering_a_node_under_a_name_no_url_can_hold_is_refused(client_for, name):
    before = Node.objects.count()
    r = client_for("agent").post("/api/v1/nodes/register/", {"name": name, **INVENTORY}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"name": [name_error("node", name)]}
    assert "ASCII letters (A-Z, a-z), digits (0-9), '.', '_' and '-'" in name_error("node", name) or "at most 200" in name_error("node", name)
    assert Node.objects.count() == before


def test_a_registered_node_is_addressable_by_its_per_node_urls(client_for, admin):
    r = client_for("agent").post("/api/v1/nodes/register/", {"name": "gpu-07.rack_2", **INVENTORY}, format="json")
    assert r.status_code == 201, r.content
    assert admin.get("/api/v1/nodes/gpu-07.rack_2/").status_code == 200
    assert admin.post("/api/v1/nodes/gpu-07.rack_2/cordon/", {"reason": "t"}, format="json").json()["state"] == "cordoned"


@pytest.mark.parametrize("name", ["../../etc/x y", "", " "])
def test_the_node_service_refuses_the_same_names(cluster, name):
    with pytest.raises(services.ValidationError) as err:
        services.register_node(name, flavor="H200", gpus=[{"index": 0}])
    assert err.value.errors["name"] == name_error("node", name)


def test_a_cluster_file_with_a_bad_node_name_loads_nothing(db):
    from clusterspec.spec import ClusterSpec, NodeSpec

    spec = ClusterSpec("t", nodes=(NodeSpec("ok-0", "H200", 2), NodeSpec("bad node", "H200", 2)), domains=(),
                       queues=())
    with pytest.raises(services.ValidationError) as err:
        services.load_cluster_spec(spec)
    assert err.value.errors == {"nodes[1].name": name_error("node", "bad node")}
    assert not Node.objects.exists()


def test_the_admin_node_form_holds_the_rule(cluster):
    from gpuplatform.admin import NodeForm

    node = Node.objects.first()
    data = {"name": "x/y", "flavor": node.flavor, "gpu_count": node.gpu_count, "cpu_milli": 0, "memory_mib": 0,
            "labels": "{}", "resume_state": "", "executor": node.executor}
    form = NodeForm(data=data, instance=node)
    assert not form.is_valid()
    assert form.errors["name"] == [name_error("node", "x/y")]


def test_a_node_named_before_the_rule_can_be_cordoned_and_renamed_in_the_admin(cluster):
    """The remedy docs/api.md gives for a node registered before the rule: the admin addresses it by id."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    bad = Node.objects.first()
    Node.objects.filter(pk=bad.pk).update(name="../../etc/x y")  # as registered before the rule
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    client.post("/admin/gpuplatform/node/", {"action": "action_cordon_node", "_selected_action": [bad.pk]})
    assert Node.objects.get(pk=bad.pk).state == "cordoned"
    with pytest.raises(services.ValidationError):  # and its agent is told at its next registration
        services.register_node("../../etc/x y", flavor=bad.flavor, gpus=[{"index": 0}])


def test_the_agent_refuses_a_bad_node_name_before_it_sends_anything():
    with pytest.raises(CommandError, match=r"--node-name '\.\./\.\./etc/x y': a node name uses"):
        call_command("gpu_agent", "--api", "http://127.0.0.1:9", "--token", "t", "--once",
                     "--node-name", "../../etc/x y", stdout=io.StringIO())


# --- F3: the token endpoints are as strict as the rest of the API ---------------------------------------------

def _token_post(body: str, content_type: str = "application/json"):
    from rest_framework.test import APIClient

    return APIClient().generic("POST", "/api/v1/auth-token/", body, content_type=content_type)


@pytest.mark.parametrize("body, content_type", [
    ('{"username": "vera", "username": "admin", "password": "pw"}', "application/json"),
    ("username=vera&username=admin&password=pw", "application/x-www-form-urlencoded"),
], ids=["json", "form"])
def test_the_token_endpoint_refuses_a_username_given_twice(users, body, content_type):
    from knox.models import AuthToken

    r = _token_post(body, content_type)
    assert r.status_code == 400, r.content
    assert list(r.json()) == ["username"] and "given" in r.json()["username"][0] and "once" in r.json()["username"][0]
    assert not AuthToken.objects.filter(user=users["staff"]).exists()  # no token issued for the last one


@pytest.mark.parametrize("body, content_type", [
    ('{"username": "admin", "password": "pw", "extra": 1}', "application/json"),
    ("username=admin&password=pw&extra=1", "application/x-www-form-urlencoded"),
], ids=["json", "form"])
def test_the_token_endpoint_refuses_an_unknown_field(users, body, content_type):
    r = _token_post(body, content_type)
    assert r.status_code == 400, r.content
    assert list(r.json()) == ["extra"] and r.json()["extra"][0].startswith("unknown field")


def test_the_token_endpoint_still_issues_a_token(users):
    assert _token_post('{"username": "admin", "password": "pw"}').status_code == 200
    assert _token_post("username=admin&password=pw", "application/x-www-form-urlencoded").status_code == 200


def test_revoke_refuses_all_given_twice_and_takes_a_form_boolean(users):
    from rest_framework.test import APIClient

    token, _ = services.issue_api_token(users["member"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    r = client.generic("POST", "/api/v1/auth-token/revoke/", "all=false&all=true",
                       content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and list(r.json()) == ["all"], r.content
    assert client.get("/api/v1/me/").status_code == 200  # nothing revoked
    r = client.generic("POST", "/api/v1/auth-token/revoke/", "all=true", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 204, r.content  # a form's text boolean, as every other form field
    assert client.get("/api/v1/me/").status_code == 401


@pytest.mark.parametrize("path, body, field", [
    ("/api/v1/queues/", "name=qa&name=qb&parent=root", "name"),
    ("/api/v1/nodes/{node}/cordon/", "reason=a&reason=b", "reason"),
    ("/api/v1/nodes/{node}/validation/", "passed=true&passed=false", "passed"),
])
def test_a_form_key_given_twice_is_refused_everywhere(admin, path, body, field):
    r = admin.generic("POST", path.format(node=Node.objects.first().name), body,
                      content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and r.json() == {field: ["given more than once: send it once"]}, r.content


def test_the_login_page_refuses_a_username_given_twice(users):
    from django.test import Client

    r = Client().post("/accounts/login/", "username=vera&username=admin&password=pw",
                      content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and b"username: given more than once" in r.content


# --- F13: a node clock thousands of years off -------------------------------------------------------------------

@pytest.mark.parametrize("when, direction", [("9999-12-31T23:59:59+14:00", "ahead of"),
                                             ("0001-01-01T00:00:00-14:00", "behind")])
def test_a_heartbeat_with_an_absurd_clock_counts_but_its_offset_is_not_kept(client_for, admin, when, direction):
    from gpuplatform.models import Event

    agent = client_for("agent")
    assert agent.post("/api/v1/nodes/register/", {"name": "clocky", **INVENTORY}, format="json").status_code == 201
    r = agent.post("/api/v1/nodes/clocky/heartbeat/", {"time": when}, format="json")
    assert r.status_code == 200, r.content
    (warning,) = r.json()["warnings"]["time"]
    assert f"years) {direction} the server's" in warning and "NODE_CLOCK_MAX_OFFSET_SECONDS" in warning
    node = admin.get("/api/v1/nodes/clocky/").json()
    assert node["clock_offset_seconds"] is None and node["last_heartbeat"] is not None
    agent.post("/api/v1/nodes/clocky/heartbeat/", {"time": when}, format="json")
    assert Event.objects.filter(kind="node_clock", node__name="clocky").count() == 1  # flagged, not once a beat


def test_a_heartbeat_with_a_sane_clock_keeps_its_offset(client_for):
    from datetime import datetime, timedelta, timezone

    agent = client_for("agent")
    agent.post("/api/v1/nodes/register/", {"name": "clocky", **INVENTORY}, format="json")
    when = (datetime.now(timezone.utc) + timedelta(seconds=30)).isoformat()
    r = agent.post("/api/v1/nodes/clocky/heartbeat/", {"time": when}, format="json")
    assert r.status_code == 200 and "warnings" not in r.json(), r.content
    assert 25 < r.json()["clock_offset_seconds"] < 35


# --- F11: quota flavors and names as strings -----------------------------------------------------------------

@pytest.mark.parametrize("flavor, words", [("H200 🚀", "a flavor is a GPU model that uses only ASCII letters"),
                                           ("H200|A100", "a quota is for one GPU flavor"),
                                           ("H100/mig-lots", "<model>/mig-<profile>")])
def test_a_quota_flavor_follows_the_flavor_rule(admin, flavor, words):
    from gpuplatform.models import Quota

    before = Quota.objects.count()
    r = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": flavor, "guarantee": 0, "quota": 0, "limit": 0},
                   format="json")
    assert r.status_code == 400 and list(r.json()) == ["flavor"] and words in r.json()["flavor"][0], r.content
    assert Quota.objects.count() == before


def test_good_quota_flavors_are_still_taken(admin):
    for flavor in ("A100-SXM4-80GB", "H100/mig-1g.10gb+me"):
        r = admin.post("/api/v1/quotas/", {"queue": "alpha", "flavor": flavor, "guarantee": 0, "quota": 0,
                                           "limit": 0}, format="json")
        assert r.status_code == 201, (flavor, r.content)


def test_a_name_given_as_a_number_is_refused_as_on_job_submission(admin):
    r = admin.post("/api/v1/quotas/", {"queue": 1, "flavor": "H100", "guarantee": 0, "quota": 0}, format="json")
    assert r.status_code == 400 and r.json() == {"queue": ["Not a valid string."]}, r.content
    job = admin.post("/api/v1/jobs/", {"queue": 1, "name": "j", "command": "true",
                                       "roles": [{"name": "w", "tasks": 1}]}, format="json")
    assert job.status_code == 400 and job.json()["queue"] == ["Not a valid string."]  # the same words
