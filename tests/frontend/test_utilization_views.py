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


def test_nodes_page_marks_and_filters_spares(client, world):
    from gpuplatform import services
    from gpuplatform.models import Node

    Node.objects.create(name="node-b", flavor="P100", gpu_count=8)
    services.set_spare("node-b", True)
    client.force_login(world["admin"])
    page = client.get("/nodes/?health=spare").content.decode()
    assert 'data-node="node-b"' in page and 'data-node="node-a"' not in page and ">spare</span>" in page
    everyone = client.get("/nodes/").content.decode()
    assert 'data-node="node-a"' in everyone and everyone.count(">spare</span>") == 1
