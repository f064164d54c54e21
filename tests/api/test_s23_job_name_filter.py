"""Trial 23: the jobs API's `name` filter was an undocumented case-insensitive substring (`?name=burst1` gave burst1
and burst10 too): `name` is exact, as `external_id`; `name__contains` is the substring search."""
import pytest

from tests.api.helpers_api import job_body


@pytest.mark.django_db
def test_job_name_is_exact_and_name_contains_searches(admin, client_for):
    member = client_for("member")
    for name in ("burst1", "burst10", "other"):
        assert member.post("/api/v1/jobs/", job_body(name=name), format="json").status_code == 201
    names = lambda q: sorted(j["name"] for j in admin.get(f"/api/v1/jobs/?{q}").json()["results"])  # noqa: E731
    assert names("name=burst1") == ["burst1"]
    assert names("name=BURST1") == []
    assert names("name__contains=BURST1") == ["burst1", "burst10"]
    schema = admin.get("/api/schema/?format=json").content.decode()
    assert "a substring of the job's name" in schema and "exact (as external_id)" in schema
