"""Two concurrent submissions with one Idempotency-Key (a client retrying before its first request answered):
one job is stored and both answers carry its id (api-idempotent-submit.yaml, the race variant)."""
from __future__ import annotations

import pytest

from tests.api.helpers_api import at_once, job_body

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_retries_with_one_key_store_one_job(client_for):
    from gpuplatform.models import IdempotencyKey, Job

    clients = [client_for("member"), client_for("member")]
    answers = at_once([lambda c=c: c.post("/api/v1/jobs/", job_body(name="race"), format="json",
                                          HTTP_IDEMPOTENCY_KEY="race-1") for c in clients])
    assert all(a is not None and a.status_code == 201 for a in answers), [getattr(a, "content", a) for a in answers]
    assert answers[0].json()["id"] == answers[1].json()["id"]
    assert Job.objects.filter(name="race").count() == 1 and IdempotencyKey.objects.filter(key="race-1").count() == 1
    assert sum(1 for a in answers if a.get("Idempotent-Replayed") == "true") == 1
