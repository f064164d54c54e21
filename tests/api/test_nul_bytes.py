"""Malformed input the schema fuzz test and a fresh user found. NUL characters anywhere in a request body are refused with a 400 naming the field (PostgreSQL's text and
jsonb cannot hold them: stored as they were, they answered 500). Found by the schema fuzz test."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path,body,field", [
    ("/api/v1/quotas/", {"queue": "alpha", "flavor": "A1\x0000", "guarantee": 0, "quota": 0}, "flavor"),
    ("/api/v1/nodes/register/", {"name": "n-nul", "flavor": "H200", "gpus": [], "labels": {"a\x00b": "x"}}, "labels"),
    ("/api/v1/nodes/register/", {"name": "n-nul", "flavor": "H200", "gpus": [], "labels": {"a": "x\x00"}}, "labels"),
    ("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": ["echo", "a\x00"],
                       "roles": [{"tasks": 1, "gpus_per_task": 1}]}, "command"),
    ("/api/v1/jobs/", {"name": "j", "queue": "alpha", "command": "echo", "env": {"A\x00": "1"},
                       "roles": [{"tasks": 1, "gpus_per_task": 1}]}, "env"),
])
def test_nul_characters_are_refused_naming_the_field(client_for, path, body, field):
    r = client_for("staff").post(path, body, format="json")
    assert r.status_code == 400, (r.status_code, r.content[:300])
    assert any(k == field or k.startswith(field) for k in r.json()), r.json()


def test_nul_in_a_looked_up_name_or_path_is_a_400_or_404(client_for):
    admin = client_for("staff")
    r = admin.post("/api/v1/quotas/", {"queue": "al\x00pha", "flavor": "A100", "guarantee": 0, "quota": 0},
                   format="json")
    assert r.status_code == 400 and "queue" in r.json(), r.content[:300]
    assert admin.get("/api/v1/nodes/a%00b/").status_code in (400, 404)
    assert admin.get("/api/v1/jobs/?queue=a%00b").status_code in (200, 400)


def test_json_nested_too_deeply_is_a_400(client_for):
    body = "[" * 100_000 + "]" * 100_000
    r = client_for("staff").generic("POST", "/api/v1/jobs/", body, content_type="application/json")
    assert r.status_code == 400 and "nested too deeply" in r.json()["non_field_errors"][0]


def test_logs_of_an_attempt_the_job_never_had_are_a_400(client_for, jobs):
    r = client_for("staff").get(f"/api/v1/jobs/{jobs['own'].pk}/logs/?attempt=7")
    assert r.status_code == 400 and "attempt" in r.json()
