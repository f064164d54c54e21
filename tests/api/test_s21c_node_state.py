"""Trial 21, F11: a not_ready node showed no reason and no "since" in the API and on the nodes page. Every state
change (services.node_states.transition) now records when the node entered its state and why (Node.state_since,
Node.state_reason; migration 0031 fills them from the audit trail), shown by the API and the nodes page."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Event, Node
from gpuplatform.scheduling.failures import detect_failures

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


@pytest.mark.django_db
def test_a_silent_node_shows_why_and_since_when_it_is_not_ready(admin, users, client, settings):
    settings.HEARTBEAT_TIMEOUT_SECONDS = 60
    services.record_heartbeat("n0", gpus=[], at=at(0))
    assert detect_failures(at(75)).not_ready == ["n0"]
    body = admin.get("/api/v1/nodes/n0/").json()
    assert body["state"] == "not_ready"
    assert body["state_since"].startswith("2024-03-01T12:01:15"), body["state_since"]
    assert body["state_reason"] == "heartbeat missed: no heartbeat since 2024-03-01 12:00:00 UTC (timeout 60 s)"
    client.force_login(users["staff"])
    page = client.get("/nodes/?health=not_ready").content.decode()
    row = page[page.index('data-node="n0"'):]
    row = row[:row.index("</tr>")]
    assert "heartbeat missed: no heartbeat since 2024-03-01 12:00:00 UTC" in row and "2024-03-01 12:01:15" in row, row
    services.record_heartbeat("n0", gpus=[], at=at(90))  # back: ready since then, nothing out of service shown
    body = admin.get("/api/v1/nodes/n0/").json()
    assert body["state"] == "ready" and body["state_since"].startswith("2024-03-01T12:01:30"), body


@pytest.mark.django_db
def test_an_admins_cordon_reason_is_the_states_reason(admin, cluster):
    r = admin.post("/api/v1/nodes/n1/cordon/", {"reason": "swap the PSU"}, format="json")
    assert r.status_code == 200, r.content
    body = admin.get("/api/v1/nodes/n1/").json()
    assert body["state"] == "cordoned" and "swap the PSU" in body["state_reason"] and body["state_since"], body


@pytest.mark.django_db
def test_the_migration_fills_them_from_the_latest_state_change_event(cluster):
    import importlib

    from django.apps import apps

    fill = importlib.import_module("gpuplatform.migrations.0031_node_state_since").fill_from_events
    node = Node.objects.get(name="n2")
    Node.objects.filter(pk=node.pk).update(state="not_ready", resume_state="ready")
    for kind, when, to, reason in (("cordoned", at(0), "cordoned", "old"),
                                   ("node_not_ready", at(30), "not_ready", "no heartbeat since 12:00:10")):
        Event.objects.create(kind=kind, node=node, time=when, message="m", data={"to": to, "reason": reason})
    Node.objects.filter(pk=node.pk).update(state_since=None, state_reason="")  # as before the migration
    fill(apps, None)
    node.refresh_from_db()
    assert (node.state_since, node.state_reason) == (at(30), "no heartbeat since 12:00:10")
    assert Node.objects.get(name="n3").state_since is None  # no Event: nothing made up
