"""Break-it trial 20, F6: one team name rule, true to its words.

Allowed: ASCII letters, digits, '.', '_' and '-', starting with a letter or digit (names.py, the rule of every name).
Compared: letter case and the separators '.', '_', '-' (and white space) ignored (models.tenancy.canonical_key), so
`foo-bar`, `foo_bar`, `Foo.Bar` and `FOOBAR` are one team; before, only '.' was ignored and the first three were
three teams while the refusal said "unique ignoring letter case and punctuation". A non-ASCII letter was refused as
if it were no letter ("uses letters, digits ..."). Migration 0030 recomputes the stored keys; rows that now clash
are kept, warned about in the admin, and refused a rename that keeps the clash. Every place that takes a team by
name follows the rule: the API and the admin (the services), the cluster loader, the demo, `?team=`."""
from __future__ import annotations

import importlib

import pytest
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Queue, Team
from gpuplatform.models.tenancy import TEAM_KEY_FIELDS, canonical_key
from gpuplatform.services.tenancy import TEAM_NAME_RULE, team_clashes, team_name_taken

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def _legacy_pair() -> tuple[Team, Team]:
    """Two teams that are one by the rule, stored before it (a queryset update skips the service's check; the keys
    are written by the queryset, as migration 0030 computes them)."""
    first = services.create_team("foo-bar")
    second = services.create_team("other", slug="other")
    Team.objects.filter(pk=second.pk).update(name="foo_bar", slug="foo_bar")
    return first, Team.objects.get(pk=second.pk)


# --- the comparison ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["foo_bar", "Foo.Bar", "FOOBAR", "foo--bar", "f.o.o-b_a_r"])
def test_names_differing_only_in_case_or_separators_are_one_team(api, variant):
    assert api.post("/api/v1/teams/", {"name": "foo-bar"}, format="json").status_code == 201
    r = api.post("/api/v1/teams/", {"name": variant}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"name": [team_name_taken(variant, "foo-bar", "foo-bar")]}
    # the words say the rule that refused it
    assert "differ only in letter case or in the separators '.', '_' and '-'" in r.json()["name"][0]
    assert Team.objects.filter(name_key="foobar").count() == 1


def test_a_slug_sent_is_held_to_the_same_rule_and_says_so(api):
    assert api.post("/api/v1/teams/", {"name": "foo-bar"}, format="json").status_code == 201
    r = api.post("/api/v1/teams/", {"name": "other", "slug": "Foo_Bar"}, format="json")
    assert r.status_code == 400 and r.json() == {"slug": [f"slug 'Foo_Bar' is taken by team 'foo-bar': "
                                                          f"{TEAM_NAME_RULE}"]}, r.content


def test_a_rename_into_another_teams_name_by_the_rule_is_refused_and_to_a_variant_of_its_own_taken(api):
    assert api.post("/api/v1/teams/", {"name": "foo-bar"}, format="json").status_code == 201
    assert api.post("/api/v1/teams/", {"name": "baz"}, format="json").status_code == 201
    r = api.patch("/api/v1/teams/baz/", {"name": "Foo_Bar"}, format="json")
    assert r.status_code == 400 and "already exists" in r.json()["name"][0], r.content
    assert api.patch("/api/v1/teams/foo-bar/", {"name": "Foo_Bar"}, format="json").status_code == 200


def test_the_key(db):
    assert {canonical_key(v) for v in ("foo-bar", "foo_bar", "Foo.Bar", "FOOBAR", "foo bar", "ＦＯＯbar")} == {"foobar"}
    assert canonical_key("Straße") == canonical_key("STRASSE")  # case-folded, not lower-cased
    assert canonical_key(None) == "" and canonical_key("-._") == ""


# --- what is allowed, in true words ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, why", [("Équipe", "'É' is a letter, but not an ASCII one"),
                                       ("数据", "'数' is a letter, but not an ASCII one"),
                                       ("team٣", "'٣' is a digit, but not an ASCII one"),
                                       ("a b", "' ' is not one of them")])
def test_a_name_outside_the_rule_is_refused_saying_what_the_rule_takes(api, name, why):
    r = api.post("/api/v1/teams/", {"name": name}, format="json")
    assert r.status_code == 400, r.content
    message = r.json()["name"][0]
    assert message.startswith("a team name uses only ASCII letters (A-Z, a-z), digits (0-9), '.', '_' and '-'")
    assert why in message and not Team.objects.filter(name=name).exists()


def test_a_trailing_newline_is_not_a_name(db):
    """The rule's regex ended in `$`, which also matches before a final newline: create_team("abc\\n") was taken."""
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("abc\n")
    assert "'\\n' is not one of them" in refused.value.errors["name"]


# --- rows stored before the rule ---------------------------------------------------------------------------------

def test_migration_0030_fills_the_keys_and_keeps_rows_that_now_clash(db):
    from django.apps import apps

    migration = importlib.import_module("gpuplatform.migrations.0030_team_one_canonical_key")
    first, second = _legacy_pair()
    Team.objects.bulk_create([Team(name="Foo.Bar", slug="foobar")])  # (bulk_create: the keys written anyway)
    Team.objects.update(**{field: "" for field in TEAM_KEY_FIELDS})  # as the columns are when added
    migration.fill_keys(apps, None)
    rows = set(Team.objects.values_list("name", "slug", *TEAM_KEY_FIELDS))
    assert rows == {("foo-bar", "foo-bar", "foobar", "foobar"), ("foo_bar", "foo_bar", "foobar", "foobar"),
                    ("Foo.Bar", "foobar", "foobar", "foobar")}
    assert migration._key("Ｆoo bar") == canonical_key("Ｆoo bar")  # the frozen formula is the model's


def test_a_clashing_pair_is_warned_about_and_refused_a_rename_that_keeps_the_clash(db):
    first, second = _legacy_pair()
    warnings = team_clashes()
    assert [w.split(" has a name")[0] for w in warnings] == ["team 'foo-bar' (slug 'foo-bar')",
                                                             "team 'foo_bar' (slug 'foo_bar')"]
    assert "one team with team 'foo_bar' (slug 'foo_bar') by the rule" in warnings[0]
    assert team_clashes(first) == team_clashes(second) == warnings
    assert team_clashes(services.create_team("unrelated")) == []
    with pytest.raises(services.ValidationError) as refused:
        services.update_team(second, name="Foo-Bar")  # still foo-bar's key
    assert refused.value.errors == {"name": team_name_taken("Foo-Bar", "foo-bar", "foo-bar")}
    assert services.update_team(second, description="kept as it is") is not None  # no rename: not checked
    assert services.update_team(second, name="foo-bar-2").name == "foo-bar-2"  # a name of its own
    # foo-bar's name is still foo_bar's slug by the rule (slugs do not change): foo-bar is the one to rename now
    [left] = team_clashes()
    assert left.startswith("team 'foo-bar' (slug 'foo-bar') has a name that is one team with team 'foo-bar-2'")
    with pytest.raises(services.ValidationError):
        services.update_team(first, name="FOO.BAR")
    services.update_team(first, name="renamed")
    assert team_clashes() == []  # two slugs one by the rule stay, unwarned: each still names its own team
    from gpuplatform.queries import find_team

    assert find_team("foo-bar") == first and find_team("foo_bar") == second


def test_the_teams_admin_shows_the_warning(admin_client):
    first, second = _legacy_pair()
    listing = admin_client.get("/admin/gpuplatform/team/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "has a name that is one team with team &#x27;foo_bar&#x27; (slug &#x27;foo_bar&#x27;)" in page
    words = "has a name that is one team with"
    assert words in admin_client.get(f"/admin/gpuplatform/team/{second.pk}/change/").content.decode()
    alone = services.create_team("alone")
    assert words not in admin_client.get(f"/admin/gpuplatform/team/{alone.pk}/change/").content.decode()


# --- every place that takes a team by name -------------------------------------------------------------------------

def test_team_filter_takes_a_variant_of_the_name(api):
    from gpuplatform.queries import find_team

    team = services.create_team("foo-bar")
    services.create_queue("fb", team=team)
    assert find_team("Foo_Bar") == team and find_team("FOOBAR") == team and find_team("nope") is None
    r = api.get("/api/v1/queues/", {"team": "Foo.Bar"})
    assert r.status_code == 200, r.content
    assert [q["name"] for q in r.json()["results"]] == ["fb"]


def test_the_cluster_loader_takes_an_existing_team_by_the_rule(db):
    from clusterspec.spec import ClusterSpec, QueueSpec

    team = services.create_team("ml_team")
    spec = ClusterSpec(name="t", domains=(), nodes=(),
                       queues=(QueueSpec("q1", team="ML-Team"), QueueSpec("q2", team="ml.team")))
    counts = services.load_cluster_spec(spec)  # refused "a team named 'ml_team' already exists" before
    assert counts["teams"] == 0 and Team.objects.count() == 1
    assert set(Queue.objects.filter(team=team).values_list("name", flat=True)) == {"q1", "q2"}


def test_the_demo_takes_a_team_demo_spelt_otherwise(db):
    from gpuplatform.management.commands.demo import ensure_demo_team

    services.register_node("local-0", flavor="H200", gpus=[{"index": 0, "uuid": "GPU-0-0"}])
    team = services.create_team("De-Mo")
    assert ensure_demo_team("pw", 1, warn=lambda m: None) == team  # a second team "demo" before
    assert Team.objects.count() == 1 and Queue.objects.get(name="demo").team == team
