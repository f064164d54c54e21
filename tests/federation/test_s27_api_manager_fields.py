"""An unknown field in a job body lists exactly the fields the endpoint takes: on a federation manager the jobs
API's plus the federation's own (`clusters`, `cluster_selector`, `data_site`, `restartable`), on a plain cluster
the jobs API's alone (new-user trial 27: the manager's list left out `clusters`, which it checks as a field)."""
from __future__ import annotations

import pytest

from gpuplatform.api.serializers import JobSubmitSerializer
from gpuplatform.federation.manager import FED_FIELDS

pytestmark = pytest.mark.django_db
JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}], "bogus": 1}


def accepted(response) -> list[str]:
    assert response.status_code == 400, response.content
    (message,) = response.json()["bogus"]
    return message.split("accepted fields: ", 1)[1].split(", ")


def test_the_accepted_list_is_the_endpoints(client_for, members, settings):
    member = client_for("member")
    own = [n for n, f in JobSubmitSerializer().fields.items() if not f.read_only]
    assert accepted(member.post("/api/v1/jobs/", JOB, format="json")) == [*own, *FED_FIELDS]
    assert accepted(member.post("/api/v1/federation/jobs/", JOB, format="json")) == [*own, *FED_FIELDS]
    settings.FEDERATION_ROLE = "worker"
    assert accepted(member.post("/api/v1/jobs/", JOB, format="json")) == own


def test_ignored_fields_are_listed_too():
    from gpuplatform.api.serializers.cluster import GpuReportSerializer

    ser = GpuReportSerializer(data={"index": 0, "bogus": 1})
    assert not ser.is_valid()
    assert ser.errors["bogus"][0].endswith("ecc_uncorrected_aggregate, retired_pages_dbe")
