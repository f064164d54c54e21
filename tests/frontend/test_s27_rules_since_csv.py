"""Session 27, an admin's report: /queues/data.json?format=csv&since=garbage answered 200 with the whole CSV while
the JSON form answered 400 for the same `since`: every form of a dashboard's data refuses it, with the JSON's words."""
from __future__ import annotations

import pytest


@pytest.mark.django_db
@pytest.mark.parametrize("query", [{"format": "csv"}, {}, {"format": "csv", "table": "pending"}])
def test_a_malformed_since_is_the_same_400_in_csv_as_in_json(client, world, query):
    client.force_login(world["admin"])
    url = "/queueing/data.json" if "table" in query else "/queues/data.json"
    json_form = client.get(url, {"since": "garbage"})
    r = client.get(url, {**query, "since": "garbage"})
    assert r.status_code == 400 and r["Content-Type"].startswith("application/json"), r.content[:200]
    assert r.json() == json_form.json() and "since must" in r.json()["since"][0]


@pytest.mark.django_db
def test_a_well_formed_since_still_gives_the_csv(client, world):
    client.force_login(world["admin"])
    r = client.get("/queues/data.json", {"format": "csv", "since": "2017-10-09T08:00:00+00:00"})
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv"), r.content[:200]
    assert r.content == client.get("/queues/data.json", {"format": "csv"}).content  # every row, as before
