"""New-user trial 25, C: an Idempotency-Key reused on another endpoint answered "(POST /api/v1/jobs/ with another
body)", as if the body were the difference; it now says "another endpoint", and "with another body" only on the
same endpoint. And a membership sent form-encoded and then as JSON with the same key and values was a 409: the
fingerprint is the canonical JSON of the parsed body, so it is the same request (replayed)."""
from __future__ import annotations

from django.contrib.auth import get_user_model


def _job(name="train"):
    return {"queue": "alpha", "name": name, "command": "sleep 3600",
            "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}]}


def test_a_key_reused_on_another_endpoint_names_that_endpoint(admin):
    first = admin.post("/api/v1/jobs/", _job(), format="json", HTTP_IDEMPOTENCY_KEY="K")
    assert first.status_code == 201, first.content
    clash = admin.post("/api/v1/queues/", {"name": "gamma", "parent": "root"}, format="json",
                       HTTP_IDEMPOTENCY_KEY="K")
    assert clash.status_code == 409, clash.content
    said = clash.json()["Idempotency-Key"][0]
    assert "(POST /api/v1/jobs/, another endpoint)" in said and "another body" not in said, said
    same = admin.post("/api/v1/jobs/", _job("train-2"), format="json", HTTP_IDEMPOTENCY_KEY="K")
    assert same.status_code == 409
    assert "(POST /api/v1/jobs/ with another body)" in same.json()["Idempotency-Key"][0], same.content


def test_the_same_values_form_encoded_then_as_json_are_one_request(admin):
    from gpuplatform.models import Membership

    get_user_model().objects.create_user("newbie", password="pw")
    body = {"team": "alpha", "user": "newbie", "role": "viewer"}
    first = admin.post("/api/v1/memberships/", body, HTTP_IDEMPOTENCY_KEY="m-1")  # form-encoded
    assert first.status_code == 201, first.content
    again = admin.post("/api/v1/memberships/", body, format="json", HTTP_IDEMPOTENCY_KEY="m-1")
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true", again.content
    assert again.json() == first.json()
    assert Membership.objects.filter(user__username="newbie").count() == 1
    other = admin.post("/api/v1/memberships/", {**body, "role": "member"}, format="json", HTTP_IDEMPOTENCY_KEY="m-1")
    assert other.status_code == 409 and "with another body" in other.json()["Idempotency-Key"][0]


def test_numbers_and_booleans_compare_as_a_form_sends_them(admin):
    body = {"name": "gamma", "parent": "root", "weight": 2}
    first = admin.post("/api/v1/queues/", body, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert first.status_code == 201, first.content
    again = admin.post("/api/v1/queues/", {**body, "weight": "2"}, HTTP_IDEMPOTENCY_KEY="q-1")  # form: "2"
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true", again.content
    other = admin.post("/api/v1/queues/", {**body, "weight": 3}, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert other.status_code == 409
