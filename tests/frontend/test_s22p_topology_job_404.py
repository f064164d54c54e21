"""The topology page answers a job filter it cannot show as topology.json does (new-user trial 22, G3): an unknown
job, or another team's job, is a 404 with the same words; the user's own job is the page (200)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

WORDS = "No such job, or not one of your teams' jobs."


def test_admin_unknown_job_is_a_404_on_the_page_as_on_its_json_twin(client, world):
    client.force_login(world["admin"])
    page, data = client.get("/topology/?job=999999"), client.get("/topology.json?job=999999")
    assert data.status_code == 404 and data.json() == {"detail": WORDS}
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/plain") and page.content.decode() == WORDS


def test_member_sees_another_teams_job_as_unknown_and_her_own_as_the_page(client, world):
    client.force_login(world["alice"])  # red member
    blue = world["jobs"]["blue-done"].pk
    page = client.get(f"/topology/?job={blue}")
    assert page.status_code == 404 and page.content.decode() == WORDS
    assert client.get(f"/topology.json?job={blue}").json() == {"detail": WORDS}
    # the same answer as a job id that does not exist: nothing tells the two apart
    assert client.get("/topology/?job=999999").content == page.content
    red = world["jobs"]["red-running"].pk
    assert client.get(f"/topology/?job={red}").status_code == 200
    assert client.get(f"/topology.json?job={red}").status_code == 200
