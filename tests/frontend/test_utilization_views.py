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


def test_held_definition_agrees_with_its_share(client, world, monkeypatch):
    """Trial 23: the held row read '(not measured yet: 0)' beside a 0.1 % share. The text says 'none measured' only
    when the held GPU-hours are 0."""
    from frontend import views_utilization
    from scheduler.core.gpu_hours import BUCKETS

    real = views_utilization.utilization

    def with_held(held):
        def fake(*args, **kwargs):
            res = real(*args, **kwargs)
            row = {b: 0.0 for b in BUCKETS} | {"capacity": 1.0, "effective_utilization": 0.0, "held": held}
            return {**res, "rows": [{**(res["rows"][0] if res["rows"] else {}), **row}]}
        return fake

    client.force_login(world["admin"])
    monkeypatch.setattr(views_utilization, "utilization", with_held(0.00069))
    held = {b["key"]: b for b in views_utilization._payload(_request(client, world))["buckets"]}["held"]
    assert held["share"] == 0.1 and "none measured" not in held["definition"] and "not measured" not in held["definition"]
    monkeypatch.setattr(views_utilization, "utilization", with_held(0.0))
    held = {b["key"]: b for b in views_utilization._payload(_request(client, world))["buckets"]}["held"]
    assert held["share"] == 0.0 and "none measured in this window: 0" in held["definition"]


def _request(client, world):
    from django.test import RequestFactory

    request = RequestFactory().get("/utilization/data.json")
    request.user = world["admin"]
    return request


def test_a_young_ledger_is_drawn_over_its_own_span(client, world):
    """Trial 23, F5: eleven minutes after a demo's workload reset the 24 h window's chart had ONE x point (bins of
    30 min from the window, while the ledger starts at the reset). The page's bins now split the span the ledger has
    records for (at least 60 s each): several points, each one bin apart."""
    from datetime import datetime, timedelta

    from gpuplatform import audit, clock

    now = clock.now()
    audit.record_event("workload_reset", "demo workload reset", time=now - timedelta(minutes=11))
    client.force_login(world["admin"])
    payload = client.get("/utilization/data.json").json()
    xs = payload["figures"]["ledger"]["data"][0]["x"]
    assert len(xs) >= 10, xs
    times = [datetime.fromisoformat(str(x).replace("Z", "+00:00")) for x in xs[:2]]
    assert (times[1] - times[0]).total_seconds() >= 60
