"""Review 19b: a team's canonical keys are stored on its row and the clash check is indexed lookups (migration 0029;
no read of every team on each create and rename), with the same rule and wording; a team's description refuses
control characters other than newline and tab (an ANSI escape was stored); the admin's "delete selected" names
every refusal (each user and its teams), deleting none."""
from __future__ import annotations

import importlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuplatform import services
from gpuplatform.models import Event, Membership, Team
from gpuplatform.models.tenancy import TEAM_KEY_FIELDS, canonical_key
from gpuplatform.services.tenancy import TEAM_NAME_RULE, team_name_taken

pytestmark = pytest.mark.django_db


def _stored(team: Team) -> tuple:
    return tuple(Team.objects.filter(pk=team.pk).values_list(*TEAM_KEY_FIELDS).get())


def _expected(name: str, slug: str) -> tuple:
    return canonical_key(name), canonical_key(slug)


# --- 1. the canonical keys on the team's row ---------------------------------------------------------------------

def test_every_write_of_a_teams_name_or_slug_writes_its_keys(users):
    team = services.create_team("Ze.ta", slug="Ze--ta")
    assert _stored(team) == ("zeta", "zeta")  # (trial 20, F6: one key, case and '.', '_', '-' left out)
    services.update_team(team, name="Ze.Ta-X")
    assert _stored(team) == ("zetax", "zeta")
    services.update_team(team, description="only the description")  # no name: the keys as they were
    assert _stored(team) == ("zetax", "zeta")
    # the ORM's other writes too (the fixtures', a shell's): create, a queryset's update, bulk_create, bulk_update
    plain = Team.objects.create(name="Plain", slug="plain-1")
    assert _stored(plain) == _expected("Plain", "plain-1")
    Team.objects.filter(pk=plain.pk).update(name="Omega")
    assert _stored(plain) == _expected("Omega", "plain-1")
    made = Team.objects.bulk_create([Team(name="Bulk.A", slug="bulk-a")])[0]
    assert _stored(Team.objects.get(name="Bulk.A")) == _expected("Bulk.A", "bulk-a")
    made = Team.objects.get(pk=Team.objects.get(name="Bulk.A").pk)
    made.name = "Bulk.B"
    Team.objects.bulk_update([made], ["name"])
    assert _stored(made) == _expected("Bulk.B", "bulk-a")
    # and the clash check reads them: a name differing in case from a name set by a queryset's update is refused
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("OMEGA", slug="omega-2")
    assert refused.value.errors == {"name": team_name_taken("OMEGA", "Omega", "plain-1")}


def _team_selects(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith("SELECT") and 'FROM "gpuplatform_team"' in q["sql"]]


def test_the_clash_check_is_indexed_lookups_on_the_keys_not_a_read_of_every_team(users):
    """Before, _team_clash read every team's name and slug (WHERE NOT id IS NULL, in Python) on each create and
    rename; now each SELECT of the team table a create or a rename makes is by id or by the key columns."""
    Team.objects.bulk_create([Team(name=f"bulk{i}", slug=f"bulk-{i}") for i in range(40)])
    with CaptureQueriesContext(connection) as create:
        services.create_team("newteam", slug="new-team")
    beta = Team.objects.get(slug="beta")
    with CaptureQueriesContext(connection) as rename:
        services.update_team(beta, name="Renamed")
    for label, captured in (("create", create), ("rename", rename)):
        selects = _team_selects(captured.captured_queries)
        clash = [sql for sql in selects if '"name_key" IN' in sql]
        assert clash, (label, selects)
        for sql in clash:
            assert all(f'"{field}" IN' in sql for field in TEAM_KEY_FIELDS) and "ORDER BY" not in sql, sql
        others = [sql for sql in selects if sql not in clash]
        assert [sql for sql in others if '"gpuplatform_team"."id" =' not in sql] == [], label


def test_the_rule_and_its_words_are_as_before_through_the_stored_keys(admin):
    # a name against another team's slug, by its slugify (ALPHA.), and a slug sent against another team's name
    assert admin.patch("/api/v1/teams/alpha/", {"name": "zeta"}, format="json").status_code == 200
    r = admin.post("/api/v1/teams/", {"name": "ALPHA.", "slug": "alpha-2"}, format="json")
    assert r.status_code == 400 and r.json() == {"name": [team_name_taken("ALPHA.", "zeta", "alpha")]}, r.content
    r = admin.post("/api/v1/teams/", {"name": "other", "slug": "Zeta"}, format="json")
    assert r.status_code == 400 and r.json() == {"slug": [f"slug 'Zeta' is taken by team 'zeta': {TEAM_NAME_RULE}"]}, \
        r.content
    # a team renamed to a variant of its own slug or name: no clash with itself
    assert admin.patch("/api/v1/teams/alpha/", {"name": "Alpha"}, format="json").status_code == 200
    assert admin.patch("/api/v1/teams/alpha/", {"name": "ALPHA"}, format="json").status_code == 200


def test_a_legacy_clashing_pair_is_kept_and_a_third_team_is_told_the_first_by_id(users):
    """Rows stored before the rule: kept as they are (the migration fills their keys, refuses nothing); a write into
    the clash names the first team (by id), as the read of every team did."""
    alpha, beta = Team.objects.get(slug="alpha"), Team.objects.get(slug="beta")
    Team.objects.filter(pk=beta.pk).update(name="ALPHA")  # beta named ALPHA next to alpha: a legacy pair
    assert services.update_team(Team.objects.get(pk=beta.pk), description="still here") is not None
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("Alpha", slug="alpha-3")
    first = min((alpha, beta), key=lambda t: t.pk)
    first = Team.objects.get(pk=first.pk)
    assert refused.value.errors == {"name": team_name_taken("Alpha", first.name, first.slug)}


def test_the_migration_fills_the_keys_of_every_team_legacy_clashes_included(users):
    from django.apps import apps

    # (0029's four keys are one since 0030, whose fill_keys is this test's now: tests/platform/test_s20_names.py too)
    migration = importlib.import_module("gpuplatform.migrations.0030_team_one_canonical_key")
    beta = Team.objects.get(slug="beta")
    Team.objects.filter(pk=beta.pk).update(name="ALPHA")  # a clash with alpha (ignoring case): the migration keeps it
    Team.objects.update(**{field: "" for field in TEAM_KEY_FIELDS})  # as the columns are when added
    migration.fill_keys(apps, None)
    for name, slug, *keys in Team.objects.values_list("name", "slug", *TEAM_KEY_FIELDS):
        assert tuple(keys) == _expected(name, slug), name
    assert Team.objects.filter(name__in=["alpha", "ALPHA"]).count() == 2


# --- 3. a description holds no terminal control characters ---------------------------------------------------------

@pytest.mark.parametrize("description, bad, at", [
    ("red \x1b[31malert\x1b[0m", "\x1b", 5),
    ("bell\x07", "\x07", 5),
    ("DEL\x7f", "\x7f", 4),
    ("C1 CSI \x9b31m", "\x9b", 8),
    ("over\rwrite", "\r", 5),  # a carriage return not before a newline rewrites the line on a terminal
    ("nul\x00", "\x00", 4),
])
def test_a_description_with_a_control_character_is_a_400_naming_description_and_the_rule(admin, description, bad, at):
    rule = (f"a team's description has no control characters other than newline and tab (a carriage return only "
            f"before a newline): {bad!r} at character {at}")
    r = admin.post("/api/v1/teams/", {"name": "ansi", "description": description}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["description"], r.content
    if bad != "\x00":  # (DRF's own rule for NUL answers first, still naming description)
        assert r.json() == {"description": [rule]}, r.content
        r = admin.patch("/api/v1/teams/alpha/", {"description": description}, format="json")
        assert r.status_code == 400 and r.json() == {"description": [rule]}, r.content
    assert not Team.objects.filter(name="ansi").exists()
    assert Team.objects.get(slug="alpha").description == ""
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("ansi", description=description)
    assert refused.value.errors == {"description": rule}


def test_newlines_tabs_and_crlf_stay_allowed(admin):
    text = "line one\n\tindented\r\nline three (a browser's textarea sends CRLF) \u00e9\u4e2d"
    r = admin.post("/api/v1/teams/", {"name": "multi", "description": text}, format="json")
    assert r.status_code == 201 and Team.objects.get(name="multi").description == text, r.content


# --- 4. the admin's "delete selected" names every refusal ---------------------------------------------------------

@pytest.fixture
def superuser_page(users):
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.services
def test_delete_selected_users_names_every_refused_user_with_its_teams_and_deletes_none(users, superuser_page):
    alice, bea, mike, vera = users["team_admin"], users["other_admin"], users["member"], users["viewer"]
    gamma = services.create_team("gamma")
    services.add_member(gamma, alice, "admin")  # alice: the last admin of alpha and gamma; bea: of beta
    User = alice.__class__
    selected = [alice.pk, mike.pk, bea.pk, vera.pk]
    r = superuser_page.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": selected}, follow=True)
    assert r.status_code == 200
    shown = _messages(r)
    assert shown[0] == "nothing deleted: 2 of the 4 selected users cannot be deleted (each below); the action " \
                       "deletes all or none", shown
    assert any("alice is the last admin of team(s) alpha, gamma:" in m for m in shown[1:]), shown
    assert any("bea is the last admin of team(s) beta:" in m for m in shown[1:]), shown
    assert len(shown) == 3 and not any("mike" in m or "vera" in m for m in shown), shown
    assert User.objects.filter(pk__in=selected).count() == 4  # all or none: the two allowed ones stay too
    assert Membership.objects.filter(user__in=selected).count() == 5
    assert not Event.objects.filter(kind="user_deleted").exists()
    # without the refused ones, the others go
    r = superuser_page.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": [mike.pk, vera.pk]}, follow=True)
    assert r.status_code == 200 and not User.objects.filter(pk__in=[mike.pk, vera.pk]).exists()
    assert Event.objects.filter(kind="user_deleted").count() == 2


@pytest.mark.services
def test_deleting_two_admins_of_one_team_together_is_refused_for_the_one_left_last(users, superuser_page):
    """The selected rows are tried in turn in one transaction: of alpha's two admins deleted together, the second is
    alpha's last admin once the first is gone, and is named."""
    alice, mike = users["team_admin"], users["member"]
    services.add_member(Team.objects.get(slug="alpha"), mike, "admin")
    r = superuser_page.post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": [alice.pk, mike.pk]}, follow=True)
    shown = _messages(r)
    assert len(shown) == 1 and shown[0].startswith("nothing deleted: user: ") and \
        "is the last admin of team(s) alpha" in shown[0], shown
    assert alice.__class__.objects.filter(pk__in=[alice.pk, mike.pk]).count() == 2


@pytest.mark.services
def test_delete_selected_memberships_names_every_refusal(users, superuser_page):
    """The same for every admin that deletes through its service (ServiceDeleteMixin): the memberships' last-admin
    rule. (A team with queues or jobs is refused by Django's own protected-objects page first.)"""
    alice, bea, mike = users["team_admin"], users["other_admin"], users["member"]
    rows = [Membership.objects.get(user=u).pk for u in (alice, mike, bea)]
    r = superuser_page.post("/admin/gpuplatform/membership/", {"action": "delete_selected", "post": "yes",
                                                               "_selected_action": rows}, follow=True)
    shown = _messages(r)
    assert shown[0].startswith("nothing deleted: 2 of the 3 selected memberships cannot be deleted"), shown
    assert any(m.startswith("role: alice is the last admin of team alpha") for m in shown[1:]), shown
    assert any(m.startswith("role: bea is the last admin of team beta") for m in shown[1:]), shown
    assert Membership.objects.filter(pk__in=rows).count() == 3
