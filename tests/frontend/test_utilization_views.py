"""The Utilization page and its data.json through Django's test client (the browser test draws it)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_utilization_page_and_data(client, world):
    assert client.get("/utilization/").status_code == 302  # login required
    client.force_login(world["admin"])
    page = client.get("/utilization/?window=7d")
    assert page.status_code == 200 and b"fig-ledger" in page.content and b"no telemetry" in page.content
    payload = client.get("/utilization/data.json").json()
    names = [t["name"] for t in payload["figures"]["ledger"]["data"]]
    assert names[-1] == "effective utilization" and "useful" in names
    assert "bucket-table" in payload["html"]["utilization-tables"]
    csv = client.get("/utilization/data.json?format=csv")
    lines = csv.content.decode().splitlines()
    assert csv["Content-Type"].startswith("text/csv") and lines[0].startswith("time,down,useful") and len(lines) == 49
    cluster = client.get("/cluster/metrics.json").json()
    assert "effective_utilization" in cluster["numbers"]
