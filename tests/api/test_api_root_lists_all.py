"""GET /api/v1/ lists every endpoint of /api/schema/, not only the router's viewsets (new-user trial 7,
F20: forecast, utilization, me, auth-token and federation were missing)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_api_root_lists_the_schemas_top_level_endpoints(admin):
    root = admin.get("/api/v1/", HTTP_ACCEPT="application/json")
    assert root.status_code == 200
    listed = root.json()
    for name in ("me", "forecast", "utilization", "auth-token", "auth-token/revoke", "federation/clusters",
                 "federation/jobs", "jobs", "teams"):
        assert name in listed, (name, sorted(listed))
        assert listed[name].endswith(f"/api/v1/{name}/"), listed[name]
    schema = admin.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200, schema.status_code
    paths = schema.json()["paths"]
    tops = {p.removeprefix("/api/v1/").rstrip("/") for p in paths if p.startswith("/api/v1/") and "{" not in p
            and not p.rstrip("/").endswith(("/current", "/summary", "/check", "/history", "/reset-counters"))}
    urls = {u.split("/api/v1/", 1)[1].rstrip("/") for u in listed.values()}
    assert not {t for t in tops if t.count("/") == 0} - urls, sorted(tops - urls)
