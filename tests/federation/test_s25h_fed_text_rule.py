"""New-user trial 25 (h, 1): the federation submit body's free-text fields follow the API's one text rule
(inputs.text_rule_error): `data_site` ("a\\u0007b" was stored and dispatched) and the `cluster_selector` values are
one line of text, as a job's name is; the jobs API's own fields of the body keep the same rule, keyed by field."""
from __future__ import annotations

import pytest

from gpuplatform.models import FederatedJob

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}


@pytest.mark.parametrize("extra, field, words", [
    ({"data_site": "a\u0007b"}, "data_site", "must be one line of text, without a newline, a tab or another control"),
    ({"data_site": "a\nb"}, "data_site", "must be one line of text"),
    ({"data_site": "a\u202eb"}, "data_site", "at character 2"),
    ({"data_site": " "}, "data_site", "must not be only white space"),
    ({"cluster_selector": {"region": "eu\u0007"}}, "cluster_selector.region", "must be one line of text"),
    ({"cluster_selector": {"region": "eu\n"}}, "cluster_selector.region", "must be one line of text"),
    ({"name": "a\u0007b"}, "name", "must be one line of text"),
    ({"external_id": "a\u0007b"}, "external_id", "control"),
    ({"working_dir": "/a\u0007b"}, "working_dir", "control"),
    ({"image": "a\u0007b"}, "image", "control"),
    ({"command": ["sleep", "6\u00070"]}, "command", "control"),
    ({"roles": [{"name": "w\u0007", "tasks": 1, "gpus_per_task": 8}]}, "roles[0].name", "must be one line of text"),
])
def test_federation_submit_text_fields_follow_the_text_rule(client_for, members, extra, field, words):
    for door in ("/api/v1/jobs/", "/api/v1/federation/jobs/"):
        r = client_for("member").post(door, {**JOB, **extra}, format="json")
        assert r.status_code == 400, r.content
        body = r.json()
        assert field in body, body
        assert words in str(body[field]) and "ErrorDetail" not in str(body[field]), body
    assert not FederatedJob.objects.exists()


def test_a_plain_data_site_and_selector_are_still_taken(client_for, members):
    r = client_for("member").post("/api/v1/federation/jobs/", {**JOB, "data_site": "eu-west 2",
                                                               "cluster_selector": {"region": "eu"}}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["data_site"] == "eu-west 2"
