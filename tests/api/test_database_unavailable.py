"""PostgreSQL down: the API and the pages answer 503 JSON with Retry-After (gpuplatform/inputs.py), never
Django's HTML 500; persistent connections are health-checked before reuse (settings.CONN_HEALTH_CHECKS)."""
from __future__ import annotations

from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.db import InterfaceError, OperationalError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("error", [OperationalError("connection refused"), InterfaceError("connection already closed")])
def test_api_answers_503_json_with_retry_after(client_for, cluster, error):
    api = client_for("staff")
    api.raise_request_exception = False
    with mock.patch("gpuplatform.api.views.jobs.JobViewSet.list", side_effect=error):
        r = api.get("/api/v1/jobs/")
    assert r.status_code == 503 and r["Content-Type"] == "application/json"
    assert int(r["Retry-After"]) > 0 and "database" in r.json()["detail"]


def test_lost_database_outside_a_view_is_a_503_too(client_for, cluster):
    """Raised in authentication (the token lookup) rather than in the view."""
    api = client_for("staff")
    api.raise_request_exception = False
    with mock.patch("knox.auth.TokenAuthentication.authenticate_credentials",
                    side_effect=OperationalError("server closed the connection unexpectedly")):
        r = api.get("/api/v1/nodes/")
    assert r.status_code == 503 and r.json()["detail"] and r["Retry-After"]


def test_other_errors_stay_500_not_503(client_for, cluster):
    api = client_for("staff")
    api.raise_request_exception = False
    with mock.patch("gpuplatform.api.views.jobs.JobViewSet.list", side_effect=RuntimeError("bug")):
        r = api.get("/api/v1/jobs/")
    assert r.status_code == 500 and r.json() == {"detail": "internal error"}


def test_connection_health_checks_are_on():
    assert django_settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


def test_submission_answers_from_what_was_committed(client_for, cluster):
    """The job committed, then re-reading it failed: 201 with what was committed, not a 500 that would
    make the client submit a duplicate."""
    from gpuplatform.models import Job

    api = client_for("member")
    api.raise_request_exception = False
    with mock.patch("gpuplatform.api.views.jobs.JobViewSet.get_queryset",
                    side_effect=OperationalError("server closed the connection")):
        r = api.post("/api/v1/jobs/", {"name": "kept", "queue": "alpha", "command": "sleep 1",
                                        "roles": [{"tasks": 1, "gpus_per_task": 1}]}, format="json")
    assert r.status_code == 201, r.content[:300]
    assert Job.objects.filter(pk=r.json()["id"], name="kept").count() == 1
    assert r.json()["state"] == "pending" and r.json()["queue"] == "alpha"
