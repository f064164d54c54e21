"""Break-it trial 18a: a user's account deleted (the admin's User delete page and its "delete selected" action, or
any other path) never takes a team's last admin with it (G13); a membership write holds the team's members lock
only; GET /api/v1/federation/clusters/ follows the lists' query-parameter rules (G15); a team's description has a
limit; a what-if drains a node once; the admin's spare actions count the nodes they changed; a member cluster's
name taken reads one way, however the requests meet."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Membership, Team

pytestmark = pytest.mark.django_db


# --- a membership write holds the team's members lock, and no second lock per membership -------------------------

@pytest.mark.services
def test_membership_writes_take_the_team_members_lock_and_no_per_membership_lock(users, monkeypatch):
    """lock_team_members already runs every membership write of a team one after the other; the per-membership
    lock_name("membership", ...) taken under it repeated it."""
    from gpuplatform.services import tenancy

    taken = []
    real = tenancy.lock_name
    monkeypatch.setattr(tenancy, "lock_name", lambda namespace, value: (taken.append(namespace), real(namespace, value)))
    team = Team.objects.get(name="beta")
    row = services.add_member(team, users["viewer"], "member")
    services.add_member(team, users["viewer"], "admin", existing=True)
    assert services.remove_member(row) is True
    assert taken and set(taken) == {"team members"}, taken


# --- G13: deleting an account keeps every team's last admin -------------------------------------------------------

@pytest.fixture
def superuser_page(users):
    """A Django test client signed in to the admin as a superuser (`root`, apart from the API's users)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def _admins(team_name: str) -> list[str]:
    return sorted(Membership.objects.filter(team__name=team_name, role="admin").values_list("user__username", flat=True))


@pytest.mark.services
def test_delete_user_refuses_the_last_admin_of_a_team_naming_the_teams(users):
    alice, bea = users["team_admin"], users["other_admin"]  # alpha's and beta's only admins
    services.add_member(Team.objects.get(name="beta"), alice, "admin")  # beta: bea and alice
    with pytest.raises(services.ValidationError) as refused:
        services.delete_user(alice)
    assert set(refused.value.errors) == {"user"}
    message = refused.value.errors["user"]
    assert "last admin of team(s) alpha:" in message and "beta" not in message, message
    assert alice.__class__.objects.filter(pk=alice.pk).exists() and _admins("alpha") == ["alice"]
    assert not Event.objects.filter(kind="user_deleted").exists()
    # beta's admins may go one at a time, the last one not
    assert services.delete_user(bea) is True
    assert _admins("beta") == ["alice"]
    event = Event.objects.get(kind="user_deleted")
    assert event.data == {"user": "bea", "teams": {"beta": "admin"}}
    assert services.delete_user(bea) is False  # gone already: nothing written
    assert Event.objects.filter(kind="user_deleted").count() == 1
    with pytest.raises(services.ValidationError) as refused:
        services.delete_user(alice)
    assert "last admin of team(s) alpha, beta:" in refused.value.errors["user"]
    # a plain member (no team left without an admin) goes, with their memberships
    assert services.delete_user(users["member"]) is True
    assert not Membership.objects.filter(user__username="mike").exists()


@pytest.mark.services
def test_any_other_path_that_deletes_an_account_is_held_to_the_rule(users):
    """A queryset delete or a model delete (a shell, another admin action) meets the same refusal, before
    anything is deleted."""
    from django.db import transaction

    alice = users["team_admin"]
    User = alice.__class__
    with pytest.raises(services.ValidationError, match="last admin of team"), transaction.atomic():
        User.objects.filter(username__in=["alice", "mike"]).delete()
    with pytest.raises(services.ValidationError, match="last admin of team"), transaction.atomic():
        User.objects.get(pk=alice.pk).delete()
    assert User.objects.filter(username__in=["alice", "mike"]).count() == 2 and _admins("alpha") == ["alice"]
    User.objects.filter(username="mike").delete()  # not an admin: deleted
    assert not User.objects.filter(username="mike").exists()


def test_the_admin_user_delete_page_and_action_refuse_a_last_admin_with_a_message(users, superuser_page):
    from django.contrib.auth import get_user_model

    User, alice, mike = get_user_model(), users["team_admin"], users["member"]
    page = superuser_page.get(f"/admin/auth/user/{alice.pk}/delete/")
    assert page.status_code == 200  # Django's confirmation page, as before
    r = superuser_page.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"}, follow=True)
    assert r.status_code == 200 and "alice is the last admin of team(s) alpha" in r.content.decode()
    assert User.objects.filter(pk=alice.pk).exists() and _admins("alpha") == ["alice"]
    r = superuser_page.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": [alice.pk, mike.pk]}, follow=True)
    assert r.status_code == 200 and "Nothing deleted: user: alice is the last admin of team(s) alpha" in \
        r.content.decode()
    assert User.objects.filter(pk__in=[alice.pk, mike.pk]).count() == 2  # all or none
    assert not Event.objects.filter(kind="user_deleted").exists()
    # Django's user admin otherwise as it was: the list, the change form, deleting an account that is no last admin
    assert superuser_page.get("/admin/auth/user/?q=mi").status_code == 200
    assert superuser_page.get(f"/admin/auth/user/{mike.pk}/password/").status_code == 200
    r = superuser_page.post(f"/admin/auth/user/{mike.pk}/delete/", {"post": "yes"})
    assert r.status_code == 302 and not User.objects.filter(pk=mike.pk).exists()
    assert Event.objects.get(kind="user_deleted").actor.username == "root"


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory and row locks: PostgreSQL")
def test_an_account_deleted_while_the_other_admin_is_removed_keeps_the_team_an_admin(users):
    """The removal of the team's other admin commits first; the account's delete, under the same team members lock,
    reads it and is refused (before, it counted two admins and the team ended with none)."""
    from tests.api.helpers_api import ordered

    alice = users["team_admin"]
    mike = services.add_member(Team.objects.get(name="alpha"), users["member"], "admin")
    out = ordered(lambda: services.remove_member(Membership.objects.get(pk=mike.pk)),
                  lambda: services.delete_user(alice.__class__.objects.get(pk=alice.pk)))
    assert out["waited"] and "first_error" not in out and isinstance(out.get("error"), services.ValidationError), out
    assert "last admin of team(s) alpha" in out["error"].errors["user"]
    assert _admins("alpha") == ["alice"]
    out = ordered(lambda: services.add_member(Team.objects.get(name="alpha"), users["member"], "admin"),
                  lambda: services.delete_user(alice.__class__.objects.get(pk=alice.pk)))
    assert out["waited"] and "first_error" not in out and "error" not in out and out["result"] is True, out
    assert _admins("alpha") == ["mike"]


# --- G15: the member clusters' list follows the lists' query-parameter rules ---------------------------------------

CLUSTERS = "/api/v1/federation/clusters/"


@pytest.fixture
def member_clusters(users):
    from gpuplatform.federation import manager

    east = manager.register_cluster(name="east", api_url="http://east.test:8000", token="t-east")
    west = manager.register_cluster(name="west", api_url="http://west.test:8000", token="t-west", enabled=False)
    return east, west


@pytest.mark.parametrize("query,field,words", [
    ("foo=1", "foo", "unknown query parameter; this list takes: "),
    ("nmae=east", "nmae", "unknown query parameter; this list takes: "),
    # sent empty: the one rule and wording of every parameter sent empty (trial 20, F3)
    ("name=", "name", "must not be empty (or only spaces): give a value, or leave the parameter out for its default"),
    ("name=%20", "name", "must not be empty"),
    ("state=%20", "state", "must not be empty"),
    ("state=", "state", "must not be empty"),
    ("enabled=%20", "enabled", "must not be empty"),
    ("enabled=", "enabled", "must not be empty"),
    ("state=bogus", "state", "unknown state 'bogus'; one of: new, healthy"),
    ("enabled=maybe", "enabled", "must be true or false"),
    ("limit=1&limit=2", "limit", "given more than once"),
])
def test_the_member_clusters_list_refuses_unknown_blank_and_bad_parameters(client_for, member_clusters, query, field,
                                                                             words):
    r = client_for("member").get(f"{CLUSTERS}?{query}")
    assert r.status_code == 400 and list(r.json()) == [field] and words in r.json()[field][0], r.content


def test_the_member_clusters_list_filters(client_for, member_clusters):
    member = client_for("member")

    def names(query=""):
        r = member.get(f"{CLUSTERS}?{query}")
        assert r.status_code == 200, r.content
        return [c["name"] for c in r.json()["results"]]

    assert names() == ["east", "west"] and names("format=json&limit=1&offset=1&ordering=-name") == ["east"]
    assert names("name=west") == ["west"] and names("name=nowhere") == []
    assert names("enabled=true") == ["east"] and names("enabled=0") == ["west"]
    assert names("state=new&state=healthy") == ["east", "west"] and names("state=lost") == []
    assert member.get(f"{CLUSTERS}?state=").status_code == 400  # sent empty: a 400, no longer "any" (trial 20, F3)


# --- a team's description has a limit ----------------------------------------------------------------------------

def test_a_team_description_past_its_limit_is_a_400_naming_description(admin, superuser_page):
    r = admin.post("/api/v1/teams/", {"name": "wordy", "description": "x" * 2001}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["description"] and "2000" in r.json()["description"][0], r.content
    assert not Team.objects.filter(name="wordy").exists()
    r = admin.post("/api/v1/teams/", {"name": "wordy", "description": "x" * 2000}, format="json")
    assert r.status_code == 201 and len(r.json()["description"]) == 2000, r.content
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("wordier", description="y" * 2001)
    assert refused.value.errors == {"description": "a team's description has at most 2000 characters (2001 given)"}
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("wordier", description=None)
    assert list(refused.value.errors) == ["description"]
    team = Team.objects.get(name="wordy")
    page = superuser_page.post(f"/admin/gpuplatform/team/{team.pk}/change/",
                               {"name": "wordy", "slug": "wordy", "description": "z" * 2001,
                                "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0})
    assert page.status_code == 200 and "at most 2000 characters (2001 given)" in page.content.decode()
    assert Team.objects.get(pk=team.pk).description == "x" * 2000


# --- a what-if drains each node once -----------------------------------------------------------------------------

def test_a_what_if_draining_a_node_named_twice_is_a_400_naming_drain_nodes(admin):
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "drain_nodes", "nodes": ["n0", "n1", "n0"]}]},
                   format="json")
    assert r.status_code == 400 and r.json() == {
        "changes[0].nodes": ["drain_nodes names 'n0' more than once: name each node once"]}, r.content
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "drain_nodes", "nodes": ["n0", "n1"]}]}, format="json")
    assert r.status_code == 200 and r.json()["written"] is False, r.content


# --- the admin's spare actions count the nodes they changed ---------------------------------------------------------

def test_the_admin_return_spares_action_counts_only_the_spares_it_returned(cluster, superuser_page):
    from gpuplatform.models import Node

    services.set_spare("n0", True)
    pks = list(Node.objects.filter(name__in=["n0", "n1", "n2"]).values_list("pk", flat=True))
    r = superuser_page.post("/admin/gpuplatform/node/", {"action": "action_unmark_spare", "_selected_action": pks},
                            follow=True)
    page = r.content.decode()
    assert r.status_code == 200 and "Return spares to ordinary use: 1 done (2 were not spares)" in page, page[-3000:]
    assert not Node.objects.filter(spare=True).exists()
    assert Event.objects.filter(kind="node_spare", data__spare=False).count() == 1
    r = superuser_page.post("/admin/gpuplatform/node/", {"action": "action_mark_spare", "_selected_action": pks[:1]},
                            follow=True)
    assert "Mark as hot spares (nodes running nothing or only interruptible jobs): 1 done" in r.content.decode()
    r = superuser_page.post("/admin/gpuplatform/node/", {"action": "action_mark_spare", "_selected_action": pks[:2]},
                            follow=True)
    assert ": 1 done (1 already spares)" in r.content.decode()


# --- a member cluster's name taken reads one way, however the requests meet --------------------------------------

TAKEN = {"name": ["a member cluster named 'east' already exists"]}
EAST = {"name": "east", "api_url": "http://east.test:8000", "token": "t-east"}


def test_a_taken_member_cluster_name_has_one_wording_in_the_api_and_the_admin(admin, superuser_page):
    from gpuplatform.models import MemberCluster

    assert admin.post(CLUSTERS, EAST, format="json").status_code == 201
    r = admin.post(CLUSTERS, {**EAST, "api_url": "http://other.test:8000"}, format="json")  # after the first's commit
    assert r.status_code == 400 and r.json() == TAKEN, r.content
    west = admin.post(CLUSTERS, {**EAST, "name": "west"}, format="json").json()
    r = admin.patch(f"{CLUSTERS}{west['id']}/", {"name": "east"}, format="json")  # a rename to it
    assert r.status_code == 400 and r.json() == TAKEN, r.content
    page = superuser_page.post("/admin/gpuplatform/membercluster/add/",
                               {"name": "east", "api_url": "http://x.test:8000", "token": "t", "labels": "{}",
                                "cost_per_gpu_hour": 0, "enabled": "on"})
    assert page.status_code == 200 and "a member cluster named &#x27;east&#x27; already exists" in page.content.decode()
    assert sorted(MemberCluster.objects.values_list("name", flat=True)) == ["east", "west"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_two_creations_of_one_member_cluster_name_at_once_read_the_same_taken_name(client_for):
    """The second request passed both the serializer's and the service's check while the first had not committed,
    then met the unique index (not the service's words); earlier or later it got the serializer's ("member cluster
    with this name already exists."). Now the name's lock: the second reads the first's row, in the one wording."""
    from gpuplatform.federation import manager
    from gpuplatform.models import MemberCluster
    from tests.api.helpers_api import at_once, ordered

    admin = client_for("staff")
    out = ordered(lambda: manager.register_cluster(**EAST), lambda: admin.post(CLUSTERS, EAST, format="json"))
    assert out["waited"] and "first_error" not in out and "error" not in out, out
    assert out["result"].status_code == 400 and out["result"].json() == TAKEN, out["result"].content
    clients = [client_for("staff") for _ in range(4)]
    answers = at_once([lambda c=c: c.post(CLUSTERS, {**EAST, "name": "north"}, format="json") for c in clients])
    assert sorted(a.status_code for a in answers) == [201, 400, 400, 400], [(a.status_code, a.content) for a in answers]
    assert {str(a.json()) for a in answers if a.status_code == 400} == {
        "{'name': [\"a member cluster named 'north' already exists\"]}"}
    assert MemberCluster.objects.filter(name__in=["east", "north"]).count() == 2
