"""POST /api/v1/forecast/ with two cancels of one running job: the second is refused as already cancelled by the
first, naming it (new-user trial 23: it read "no pending or running job 44")."""
from __future__ import annotations

from gpuplatform.models import Job
from tests.api.test_forecast_api import URL, busy  # noqa: F401  (fixture)


def test_a_second_cancel_of_a_running_job_names_the_first(busy, admin):
    run0 = Job.objects.get(name="run0")
    assert run0.state == "running"
    r = admin.post(URL, {"changes": [{"kind": "cancel", "job": run0.pk}, {"kind": "cancel", "job": run0.pk}]},
                   format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {"changes[1].job": [f"job {run0.pk} is already cancelled by changes[0]"]}
