"""Trial-fix 18d: a team's name and description change through services.update_team (the admin's team change form
and PATCH / PUT /api/v1/teams/<slug>/: create_team's rules, a name taken in one wording under the name's lock, an
Event "team_updated"; the admin's form saved the row itself, unaudited, and two renames to one name met at the
unique index); a member added while their account is deleted is a 400 on `user`, not the foreign key's
IntegrityError at commit (a 500); lock_name's docstring names its callers."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from gpuplatform import services
from gpuplatform.models import Event, Membership, Queue, Team
from gpuplatform.services.tenancy import team_name_taken

pytestmark = pytest.mark.django_db

TAKEN_BETA = {"name": [team_name_taken("beta", "beta", "beta")]}  # trial 18f: the one wording names the slug


@pytest.fixture
def superuser_page(users):
    """A Django test client signed in to the admin as a superuser (`root`, apart from the API's users)."""
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def _team_form(name: str, description: str = "") -> dict:
    return {"name": name, "description": description, "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0}


# --- services.update_team -----------------------------------------------------------------------------------------

def test_update_team_renames_and_describes_a_team_keeping_its_slug_and_records_what_changed(users):
    alpha = Team.objects.get(name="alpha")
    saved = services.update_team(alpha, name="alpha-ml", description="vision", actor=users["staff"])
    assert (saved.pk, saved.name, saved.slug, saved.description) == (alpha.pk, "alpha-ml", "alpha", "vision")
    event = Event.objects.get(kind="team_updated")
    assert event.actor == users["staff"] and event.message == "team alpha renamed alpha-ml (name, description changed)"
    assert event.data == {"team": "alpha-ml", "slug": "alpha", "changes": {
        "name": {"from": "alpha", "to": "alpha-ml"}, "description": {"from": "", "to": "vision"}}}
    # what refers to the team by its row follows: its queue, its members
    assert Queue.objects.get(name="alpha").team.name == "alpha-ml"
    assert set(Membership.objects.filter(team__name="alpha-ml").values_list("user__username", flat=True)) == {
        "alice", "mike", "vera"}
    # nothing to change: nothing written, no Event; the description alone
    assert services.update_team(saved, name="alpha-ml", description="vision").description == "vision"
    services.update_team(saved, description="")
    assert list(Event.objects.filter(kind="team_updated").values_list("message", flat=True).order_by("id")) == [
        "team alpha renamed alpha-ml (name, description changed)", "team alpha-ml updated (description changed)"]


@pytest.mark.parametrize("fields,errors", [
    ({"name": "beta"}, {"name": team_name_taken("beta", "beta", "beta")}),
    ({"name": "Beta"}, {"name": team_name_taken("Beta", "beta", "beta")}),
    ({"name": "no spaces"}, {"name": "a team name uses only ASCII letters (A-Z, a-z), digits (0-9), '.', '_' and '-', "
                                     "starting with a letter or digit ('no spaces' does not: ' ' is not one of them)"}),
    ({"name": ""}, {"name": "a team name must not be empty"}),
    ({"name": "x" * 101}, {"name": "a team name must be at most 100 characters"}),
    ({"description": "d" * 2001}, {"description": "a team's description has at most 2000 characters (2001 given)"}),
    ({"name": "beta", "description": 7}, {"name": team_name_taken("beta", "beta", "beta"),
                                          "description": "a team's description is text"}),
])
def test_update_team_refuses_what_create_team_refuses_writing_nothing(users, fields, errors):
    alpha = Team.objects.get(name="alpha")
    with pytest.raises(services.ValidationError) as refused:
        services.update_team(alpha, **fields)
    assert refused.value.errors == errors
    assert Team.objects.filter(pk=alpha.pk).values_list("name", "description").get() == ("alpha", "")
    assert not Event.objects.filter(kind="team_updated").exists()


def test_update_team_of_a_deleted_team_is_none_and_a_case_change_of_its_own_name_is_a_rename(users):
    gamma = services.create_team("gamma")
    assert services.update_team(gamma, name="Gamma").name == "Gamma"  # its own slug: no clash with itself
    services.delete_team(gamma)
    assert services.update_team(gamma, name="delta") is None
    assert not Team.objects.filter(name="delta").exists()


# --- the API: PATCH / PUT /api/v1/teams/<slug>/ --------------------------------------------------------------------

def test_patch_and_put_of_a_team_go_through_update_team(admin, client_for):
    r = admin.patch("/api/v1/teams/alpha/", {"name": "alpha-ml"}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "alpha-ml" and r.json()["slug"] == "alpha", r.content
    assert Event.objects.get(kind="team_updated").actor.username == "admin"
    assert admin.get("/api/v1/teams/alpha/").json()["name"] == "alpha-ml"  # the URL is the slug's: it stays
    r = admin.put("/api/v1/teams/alpha/", {"name": "alpha", "description": "back"}, format="json")
    assert r.status_code == 200 and (r.json()["name"], r.json()["description"]) == ("alpha", "back"), r.content
    r = admin.put("/api/v1/teams/alpha/", {"name": "alpha"}, format="json")  # PUT replaces: both fields
    assert r.status_code == 400 and list(r.json()) == ["description"], r.content
    r = admin.patch("/api/v1/teams/alpha/", {"name": "beta"}, format="json")
    assert r.status_code == 400 and r.json() == TAKEN_BETA, r.content
    r = admin.patch("/api/v1/teams/alpha/", {"description": "d" * 2001}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["description"], r.content
    r = admin.patch("/api/v1/teams/alpha/", {"slug": "alpha-2"}, format="json")
    assert r.status_code == 400 and "slug does not change" in r.json()["slug"][0], r.content
    assert admin.patch("/api/v1/teams/alpha/", {"slug": "alpha", "description": "same slug"},
                       format="json").status_code == 200
    r = admin.patch("/api/v1/teams/alpha/", {"owner": "bob"}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["owner"], r.content
    for role in ("team_admin", "member"):
        assert client_for(role).patch("/api/v1/teams/alpha/", {"name": "mine"}, format="json").status_code == 403
    assert admin.patch("/api/v1/teams/nope/", {"name": "x"}, format="json").status_code == 404
    assert Team.objects.get(slug="alpha").name == "alpha"
    assert Event.objects.filter(kind="team_updated").count() == 3


# --- the admin's team change form --------------------------------------------------------------------------------

def test_the_admin_team_change_form_saves_through_update_team_and_keeps_the_slug(superuser_page):
    alpha = Team.objects.get(name="alpha")
    page = superuser_page.post(f"/admin/gpuplatform/team/{alpha.pk}/change/",
                               {**_team_form("alpha-ml", "vision"), "slug": "hijacked"})
    assert page.status_code == 302, page.content.decode()[-2000:]
    assert Team.objects.filter(pk=alpha.pk).values_list("name", "slug", "description").get() == (
        "alpha-ml", "alpha", "vision")
    event = Event.objects.get(kind="team_updated")
    assert event.actor.username == "root" and event.data["changes"]["name"] == {"from": "alpha", "to": "alpha-ml"}
    page = superuser_page.post(f"/admin/gpuplatform/team/{alpha.pk}/change/", _team_form("beta"))
    assert page.status_code == 200 and "a team named &#x27;beta&#x27; (slug &#x27;beta&#x27;) already exists" in page.content.decode()
    added = superuser_page.post("/admin/gpuplatform/team/add/", {**_team_form("beta"), "slug": "beta-2"})
    assert added.status_code == 200 and "a team named &#x27;beta&#x27; (slug &#x27;beta&#x27;) already exists" in added.content.decode()
    assert Team.objects.get(pk=alpha.pk).name == "alpha-ml" and Event.objects.filter(kind="team_updated").count() == 1


# --- races: PostgreSQL -------------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory and row locks: PostgreSQL")
def test_two_renames_to_one_name_at_once_give_one_200_and_the_names_400(client_for):
    """Both checks passed before either committed: the second rename met the unique index (an IntegrityError, a
    500). Under the name's lock the second waits for the first and reads its row: the one wording."""
    from tests.api.helpers_api import at_once, ordered

    staff = client_for("staff")
    out = ordered(lambda: services.update_team(Team.objects.get(name="alpha"), name="gamma"),
                  lambda: staff.patch("/api/v1/teams/beta/", {"name": "gamma"}, format="json"))
    assert out["waited"] and "first_error" not in out and "error" not in out, out
    assert out["result"].status_code == 400 and out["result"].json() == {
        "name": [team_name_taken("gamma", "gamma", "alpha")]}, out["result"].content
    assert Team.objects.get(name="gamma").slug == "alpha" and Team.objects.filter(name="beta").exists()
    # a rename and a creation of one name at once: one of them, and the name's 400 for the others
    clients = [client_for("staff") for _ in range(3)]
    answers = at_once([lambda: clients[0].patch("/api/v1/teams/beta/", {"name": "delta"}, format="json"),
                       lambda: clients[1].post("/api/v1/teams/", {"name": "delta"}, format="json"),
                       lambda: clients[2].patch("/api/v1/teams/alpha/", {"name": "delta"}, format="json")])
    assert sorted(a.status_code for a in answers)[1:] == [400, 400] and sorted(
        a.status_code for a in answers)[0] in (200, 201), [(a.status_code, a.content) for a in answers]
    winner = Team.objects.get(name="delta").slug  # the one wording names the team's slug (trial 18f)
    assert {str(a.json()) for a in answers if a.status_code == 400} == {
        str({"name": [team_name_taken("delta", "delta", winner)]})}
    assert Team.objects.filter(name="delta").count() == 1
    # two teams swapping names at once: each rename takes both names' locks in one order (no deadlock, no 503:
    # test_a_rename_takes_the_old_and_the_new_names_lock_in_one_order); each reads the other's name taken
    names = dict(Team.objects.filter(slug__in=["alpha", "beta"]).values_list("slug", "name"))
    swap = at_once([lambda: clients[0].patch("/api/v1/teams/alpha/", {"name": names["beta"]}, format="json"),
                    lambda: clients[1].patch("/api/v1/teams/beta/", {"name": names["alpha"]}, format="json")])
    assert [a.status_code for a in swap] == [400, 400], [(a.status_code, a.content) for a in swap]
    assert [a.json()["name"][0] for a in swap] == [team_name_taken(names["beta"], names["beta"], "beta"),
                                                   team_name_taken(names["alpha"], names["alpha"], "alpha")]


def test_a_rename_takes_the_old_and_the_new_names_lock_in_one_order(users, monkeypatch):
    """Two teams swapping names at once each held its old name's lock and asked for the other's: a deadlock (a 503,
    "the database is unavailable"). Whichever name is the old one, the names are locked in one order."""
    from gpuplatform.services import tenancy

    taken = []
    real = tenancy.lock_name
    monkeypatch.setattr(tenancy, "lock_name", lambda namespace, value: (taken.append((namespace, value)),
                                                                        real(namespace, value)))
    orders = []
    for team, other in (("beta", "alpha"), ("alpha", "beta")):
        taken.clear()
        with pytest.raises(services.ValidationError):
            services.update_team(Team.objects.get(name=team), name=other)
        orders.append([value for namespace, value in taken if namespace == "team name"])
        assert taken[-1] == ("team slug", other)  # the new name's slug after the names (create_team's order)
    assert orders == [["alpha", "beta"], ["alpha", "beta"]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("row and advisory locks: PostgreSQL")
@pytest.mark.parametrize("first", ["delete_user", "add_member"])
def test_a_member_added_while_their_account_is_deleted_is_a_400_on_user_or_deleted_with_it(client_for, users, first):
    """The add inserted its membership with the account's delete uncommitted; the foreign key, checked at commit,
    failed: an IntegrityError (a 500 through the API). add_member now locks the user's row after the team's members
    lock (delete_user's order): the delete first, the add waits for it and answers a 400 on `user`; the add first,
    the delete waits for it and takes the new membership with the account."""
    from tests.api.helpers_api import ordered

    User = get_user_model()
    mike = users["member"]  # a member of alpha (not its last admin), added to beta here
    staff = client_for("staff")
    delete = lambda: services.delete_user(User.objects.get(pk=mike.pk))  # noqa: E731
    add = lambda: staff.post("/api/v1/memberships/", {"team": "beta", "user": "mike", "role": "member"},  # noqa: E731
                             format="json")
    if first == "delete_user":
        out = ordered(delete, add)
        assert out["waited"] and "first_error" not in out and "error" not in out, out
        assert out["result"].status_code == 400 and out["result"].json() == {
            "user": ["user mike no longer exists"]}, out["result"].content
    else:
        out = ordered(lambda: services.add_member(Team.objects.get(name="beta"), User.objects.get(pk=mike.pk)),
                      delete)
        assert out["waited"] and "first_error" not in out and "error" not in out, out
        assert out["result"] is True
        assert Event.objects.get(kind="user_deleted").data["teams"] == {"alpha": "member", "beta": "member"}
    assert not User.objects.filter(pk=mike.pk).exists() and not Membership.objects.filter(user_id=mike.pk).exists()


def test_add_member_of_a_deleted_account_is_a_400_on_user_and_a_role_change_finds_nothing(users):
    mike = users["member"]
    beta = Team.objects.get(name="beta")
    services.delete_user(get_user_model().objects.get(pk=mike.pk))
    with pytest.raises(services.ValidationError) as refused:
        services.add_member(beta, mike, "member")
    assert refused.value.errors == {"user": "user mike no longer exists"}
    assert services.add_member(Team.objects.get(name="alpha"), mike, "admin", existing=True) is None
    assert not Membership.objects.filter(user_id=mike.pk).exists()


# --- lock_name's docstring names its uses ----------------------------------------------------------------------

def test_lock_names_docstring_names_each_module_that_takes_it_and_no_use_it_lost():
    """It listed "a user's membership of a team", which now takes lock_team_members (one lock per team), and
    missed the member clusters' and the rules' names."""
    import ast
    from pathlib import Path

    import gpuplatform
    from gpuplatform.scheduling.locks import lock_name

    root = Path(gpuplatform.__file__).parent
    callers = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "lock_name"
               for node in ast.walk(tree)):
            callers.add(".".join(path.relative_to(root).with_suffix("").parts))
    callers.discard("scheduling.locks")
    assert callers == {"services.tenancy", "services.rules", "federation.manager", "api.idempotency", "services.nodes"}, \
        callers
    doc = " ".join(lock_name.__doc__.split())
    assert all(module in doc for module in callers), doc
    assert "a user's membership of a team" not in doc
