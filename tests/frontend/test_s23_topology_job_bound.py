"""Trial 23: topology.json?job=99999999999999999999 said "must be a job id (a positive whole number)" of a value that
is one, only out of range: the bound is named instead; the largest id is a job id (no such job: a 404)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

BIG = "99999999999999999999"


def test_a_job_id_out_of_range_is_told_its_bound(client, world):
    client.force_login(world["admin"])
    r = client.get(f"/topology.json?job={BIG}")
    assert r.status_code == 400
    assert r.json() == {"job": [f"must be at most 9223372036854775807, got {BIG}"]}
    page = client.get(f"/topology/?job={BIG}")
    assert page.status_code == 400 and "must be at most 9223372036854775807" in page.content.decode()


def test_the_largest_id_is_a_job_id_and_words_stay_for_non_numbers(client, world):
    client.force_login(world["admin"])
    assert client.get("/topology.json?job=9223372036854775807").status_code == 404  # a job id, none such
    for bad in ("0", "-3", "abc", "1.5"):
        r = client.get(f"/topology.json?job={bad}")
        assert r.status_code == 400 and r.json()["job"][0].startswith("must be a job id (a positive whole number)")
