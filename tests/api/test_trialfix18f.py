"""Trial-fix 18f: team names are unique ignoring letter case and punctuation, and apart from other teams' slugs
(services.tenancy: team_keys, whatever the order of creations and renames; the name locks are taken on those keys,
so `Zeta`, `zeta` and `ze.ta` sent at once give one 200); every `?team=` filter resolves a value to one team
(queries.find_team: the slug, else the name), the lists and /api/v1/utilization/ alike."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Team
from gpuplatform.services.tenancy import team_name_taken

pytestmark = pytest.mark.django_db


def _taken(r, field="name"):
    assert r.status_code == 400 and list(r.json()) == [field], r.content
    return r.json()[field][0]


def test_a_rename_then_a_creation_differing_in_case_is_refused(admin):
    r = admin.patch("/api/v1/teams/alpha/", {"name": "mu"}, format="json")
    assert r.status_code == 200 and r.json()["slug"] == "alpha", r.content
    # "Mu" makes the slug mu, which no team has (the renamed team kept alpha): it was created
    assert _taken(admin.post("/api/v1/teams/", {"name": "Mu"}, format="json")).startswith(
        "a team named 'mu' (slug 'alpha') already exists")
    # (a slug of its own: "m-u" would be refused too since trial 20, F6, '-' being ignored as '.' is)
    assert _taken(admin.post("/api/v1/teams/", {"name": "M.u", "slug": "m-u-2"}, format="json")).startswith(
        "a team named 'mu'")
    assert not Team.objects.filter(name__in=["Mu", "M.u"]).exists()


def test_a_creation_then_a_rename_differing_in_case_is_refused(admin):
    assert admin.post("/api/v1/teams/", {"name": "Nu"}, format="json").status_code == 201
    assert _taken(admin.patch("/api/v1/teams/alpha/", {"name": "nu"}, format="json")).startswith(
        "a team named 'Nu' (slug 'nu') already exists")
    assert Team.objects.get(slug="alpha").name == "alpha"


def test_a_name_may_not_be_another_teams_slug_nor_a_slug_another_teams_name(admin):
    assert admin.patch("/api/v1/teams/alpha/", {"name": "zeta"}, format="json").status_code == 200
    # a slug sent equal (ignoring case) to another team's name
    assert _taken(admin.post("/api/v1/teams/", {"name": "other", "slug": "zeta"}, format="json"), "slug").startswith(
        "slug 'zeta' is taken by team 'zeta': ")  # (then the rule: trial 20, F6)
    # a name equal to another team's slug (alpha's, kept by the rename), in any case
    assert _taken(admin.post("/api/v1/teams/", {"name": "ALPHA", "slug": "alpha-2"}, format="json")).startswith(
        "a team named 'zeta' (slug 'alpha') already exists")
    assert _taken(admin.patch("/api/v1/teams/beta/", {"name": "Alpha"}, format="json")).startswith(
        "a team named 'zeta' (slug 'alpha')")
    # its own slug is no clash: a team may take back the name of its slug
    assert admin.patch("/api/v1/teams/alpha/", {"name": "Alpha"}, format="json").status_code == 200


def test_services_refuse_a_punctuation_variant_of_another_teams_name(users):
    services.update_team(Team.objects.get(slug="alpha"), name="Ze.ta")  # slug stays alpha
    with pytest.raises(services.ValidationError) as refused:
        services.create_team("zeta")
    assert refused.value.errors == {"name": team_name_taken("zeta", "Ze.ta", "alpha")}


def test_every_team_filter_names_one_team_by_slug_or_name(admin):
    beta = Team.objects.get(slug="beta")
    services.update_team(Team.objects.get(slug="alpha"), name="renamed")
    for url in ("/api/v1/queues/", "/api/v1/jobs/", "/api/v1/memberships/"):
        by_slug = admin.get(url, {"team": "beta"})
        by_name = admin.get(url, {"team": "renamed"})
        assert by_slug.status_code == by_name.status_code == 200, (url, by_slug.content, by_name.content)
        teams = {row["team"] for row in by_name.json()["results"]}
        assert teams <= {"alpha"}, (url, teams)
        assert {row["team"] for row in by_slug.json()["results"]} <= {beta.slug}
        r = admin.get(url, {"team": "nope"})
        assert r.status_code == 400 and r.json() == {"team": ["unknown team 'nope'"]}, r.content
    # the utilization API: the slug works too (it took names only), and an unknown one is the same 400
    assert admin.get("/api/v1/utilization/", {"scope": "team", "team": "alpha"}).status_code == 200
    assert admin.get("/api/v1/utilization/", {"scope": "team", "team": "renamed"}).status_code == 200
    r = admin.get("/api/v1/utilization/", {"scope": "team", "team": "nope"})
    assert r.status_code == 400 and r.json() == {"team": ["unknown team 'nope'"]}, r.content


def test_a_legacy_pair_of_a_slug_and_another_teams_name_resolves_to_the_slugs_team(admin):
    """Rows stored before the rule: nothing migrates; the filter still names one team, the slug's."""
    from gpuplatform.queries import find_team

    Team.objects.filter(slug="alpha").update(name="beta-old")
    Team.objects.filter(slug="beta").update(name="alpha")  # beta NAMED alpha, next to the team with slug alpha
    assert find_team("alpha").slug == "alpha" and find_team("beta-old").slug == "alpha"
    rows = admin.get("/api/v1/queues/", {"team": "alpha"}).json()["results"]
    assert rows and {row["team"] for row in rows} == {"alpha"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
@pytest.mark.postgresql("advisory locks: PostgreSQL")
def test_three_renames_differing_in_case_and_punctuation_at_once_give_one_200(client_for):
    from tests.api.helpers_api import at_once

    services.create_team("gamma")
    clients = [client_for("staff") for _ in range(3)]
    answers = at_once([lambda: clients[0].patch("/api/v1/teams/alpha/", {"name": "Zeta"}, format="json"),
                       lambda: clients[1].patch("/api/v1/teams/beta/", {"name": "zeta"}, format="json"),
                       lambda: clients[2].patch("/api/v1/teams/gamma/", {"name": "ze.ta"}, format="json")])
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 400, 400], [(a.status_code, a.content) for a in answers]
    winner = next(a.json() for a in answers if a.status_code == 200)
    for a in answers:
        if a.status_code == 400:
            assert a.json() == {"name": [team_name_taken("x", winner["name"], winner["slug"])]}, a.content
    assert Team.objects.filter(name__in=["Zeta", "zeta", "ze.ta"]).count() == 1
