"""Review 19b: the topology and utilization pages (and their JSON) take `?team=` as a slug or a name, resolved to one
team as the API's ?team= (queries.find_team: the slug first); an unknown one stays a 400 naming it."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def renamed(client, world):
    """Team red renamed "crimson" (its slug stays red), the client signed in as the platform admin."""
    services.update_team(world["red"], name="crimson")
    client.force_login(world["admin"])
    return client


def _topology(client, team):
    r = client.get("/topology.json", {"zoom": "nvl-0", "team": team})
    assert r.status_code == 200, r.content
    return r.json()


def test_topology_takes_a_teams_slug_as_its_name(renamed):
    by_slug, by_name = _topology(renamed, "red"), _topology(renamed, "crimson")
    assert by_slug["filters"]["team"] == by_name["filters"]["team"] == "crimson"
    assert by_slug["totals"] == by_name["totals"] and by_slug["shown_gpus"] == by_name["shown_gpus"] == 4
    assert _topology(renamed, "blue")["shown_gpus"] != 4  # (the filter filters)
    page = renamed.get("/topology/", {"team": "red"})
    assert page.status_code == 200, page.content
    html = page.content.decode()
    assert '<option value="crimson" selected>' in html and 'data-team="crimson"' in html


def test_utilization_takes_a_teams_slug_as_its_name(renamed, monkeypatch):
    from frontend import views_utilization

    asked = []
    real = views_utilization.utilization

    def spy(*args, **kwargs):
        asked.append(kwargs.get("team"))
        return real(*args, **kwargs)

    monkeypatch.setattr(views_utilization, "utilization", spy)
    page = renamed.get("/utilization/", {"team": "red"})
    assert page.status_code == 200, page.content
    assert '<option value="crimson" selected>' in page.content.decode()
    for team in ("red", "crimson"):
        r = renamed.get("/utilization/data.json", {"team": team})
        assert r.status_code == 200, r.content
    assert asked == ["crimson", "crimson", "crimson"]  # the ledger filtered by the team's name (as the API passes it)


def test_an_unknown_team_is_still_a_400_naming_it(renamed):
    for url in ("/topology/", "/utilization/"):
        r = renamed.get(url, {"team": "nope"})
        assert r.status_code == 400 and "team: no team named 'nope'" in r.content.decode(), (url, r.content)
    for url in ("/topology.json", "/utilization/data.json"):
        r = renamed.get(url, {"team": "nope"})
        assert r.status_code == 400 and r.json() == {"team": ["no team named 'nope'"]}, (url, r.content)


def test_a_legacy_pair_resolves_to_the_slugs_team_as_the_api(renamed):
    """blue NAMED red next to the team with slug red (rows stored before the rule): the slug's team, crimson, as
    queries.find_team answers the API's ?team=red."""
    Team.objects.filter(slug="blue").update(name="red")
    assert _topology(renamed, "red")["filters"]["team"] == "crimson"
    page = renamed.get("/utilization/", {"team": "red"})
    assert page.status_code == 200 and '<option value="crimson" selected>' in page.content.decode()
