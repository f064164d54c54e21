"""GPU shares counted as GPU-equivalents everywhere a person reads them (new-user report 2, items 2-4): the
jobs list and job page, the `submitted` Event, the nodes API's allocated_gpus, the submit form's estimate and
the forecast API's hypothetical job. The mixed node and queue are test_gpu_sharing's."""
from __future__ import annotations

import pytest

from tests.platform.test_gpu_sharing import CLOCK, api, mixed, submit  # noqa: F401 (fixtures)

MIXED_ROLES = [{"name": "trainer", "gpus_per_task": 1}, {"name": "workers", "tasks": 2, "gpu_fraction": 0.25}]


@pytest.fixture
def boss(mixed, client, django_user_model):  # noqa: F811
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def test_jobs_list_and_job_page_count_shares_as_gpu_equivalents(api, boss):  # noqa: F811
    r = api.post("/api/v1/jobs/", {"name": "mixedjob", "queue": "q", "command": "sleep 1", "roles": MIXED_ROLES},
                 format="json")
    assert r.status_code == 201, r.content
    assert (r.json()["gpus"], r.json()["gpu_request"]) == (1.5, "1+2x0.25")
    html = boss.get("/jobs/").content.decode()
    row = html[html.index(f'data-job="{r.json()["id"]}"'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num">1.5</td>' in row, row
    assert "1 x 1, 2 x 0.25" in row, row
    page = boss.get(f"/jobs/{r.json()['id']}/").content.decode()
    assert "<dt>GPUs</dt><dd>1.5" in page and "1+2x0.25" in page
    whole = submit(api, "whole", {"gpus_per_task": 2}).json()  # 2 GPUs: after 1.5 in the GPUs sort
    html = boss.get("/jobs/?sort=gpus").content.decode()
    assert html.index(f'data-job="{r.json()["id"]}"') < html.index(f'data-job="{whole["id"]}"')


def test_submitted_event_counts_shares_as_gpu_equivalents(api):  # noqa: F811
    from gpuplatform.models import Event

    mixed_job = api.post("/api/v1/jobs/", {"name": "mixedjob", "queue": "q", "command": "sleep 1",
                                           "roles": MIXED_ROLES}, format="json").json()
    halves = submit(api, "halves", {"tasks": 2, "gpu_fraction": 0.5}).json()
    whole = submit(api, "whole", {"tasks": 2, "gpus_per_task": 2}).json()
    text = {j["name"]: Event.objects.get(kind="submitted", job_id=j["id"]) for j in (mixed_job, halves, whole)}
    assert text["mixedjob"].message == "mixedjob submitted to q: 1.5 GPU-equivalents (1+2x0.25)"
    assert text["halves"].message == "halves submitted to q: 1 GPU-equivalents (2x0.5)"
    assert text["whole"].message == "whole submitted to q: 4 GPUs"
    assert text["mixedjob"].data["gpus"] == 1.5


def test_nodes_api_allocated_gpus_counts_shares_as_gpu_equivalents(api):  # noqa: F811
    from gpuplatform.scheduling import store

    assert submit(api, "halves", {"tasks": 4, "gpu_fraction": 0.5}).status_code == 201
    assert submit(api, "whole", {"gpus_per_task": 1}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    node = api.get("/api/v1/nodes/mixed/").json()
    assert node["allocated_gpus"] == 3  # 4 x 0.5 + 1 whole GPU, not 5 allocations


def _estimate_form(**role) -> dict:
    data = {"team": "alpha", "queue": "q", "priority": "0", "preemptible": "on", "topology_mode": "none",
            "roles-TOTAL_FORMS": "1", "roles-0-name": "worker", "roles-0-tasks": "8", "roles-0-gpus_per_task": "1"}
    data.update({f"roles-0-{k}": v for k, v in role.items()})
    return data


def test_submit_form_estimate_reads_the_gpu_fraction(boss):
    """8 x 0.25 is 2 GPU-equivalents (the 2 shared GPUs hold them), not 8 GPUs above the queue's limit of 6."""
    r = boss.post("/jobs/new/estimate/", _estimate_form(gpu_fraction="0.25"))
    assert r.status_code == 200 and not r.json()["no_estimate"], r.json()
    assert r.json()["text"].startswith("would start"), r.json()
    whole = boss.post("/jobs/new/estimate/", _estimate_form()).json()  # 8 whole GPUs: above the limit
    assert whole["no_estimate"] and "limit" in whole["text"], whole
    bad = boss.post("/jobs/new/estimate/", _estimate_form(gpu_fraction="1.5"))
    assert bad.status_code == 400 and "gpu_fraction" in str(bad.json()["errors"]), bad.json()


def test_forecast_api_takes_the_submission_role_and_job_fields(api):  # noqa: F811
    def ask(**change):
        return api.post("/api/v1/forecast/", {"changes": [{"kind": "submit", "queue": "q", "tasks": 8, **change}]},
                        format="json")

    for change in ({"gpu_fraction": 0.25, "interruptible": True}, {"gpus_per_task": 0.25}):
        r = ask(**change)
        assert r.status_code == 200, r.content
        (mine,) = [j for j in r.json()["jobs"] if j["hypothetical"]]
        assert mine["after"]["estimated_start"] is not None, mine  # 2 GPU-equivalents fit; 8 GPUs would not
    whole = ask(gpus_per_task=1).json()
    (mine,) = [j for j in whole["jobs"] if j["hypothetical"]]
    assert mine["after"]["estimated_start"] is None and "limit" in mine["after"]["no_estimate"], mine
    r = ask(gpu_fraction=1.5)
    assert r.status_code == 400 and "changes[0].gpu_fraction" in r.json(), r.content
    r = ask(gpu_fraction=0.5, interruptible=True, preemptible=False)
    assert r.status_code == 400 and "must be preemptible" in str(r.json()["changes[0].interruptible"]), r.content
    r = ask(gpu_fraction=0.5, mig_profile="1g.18gb")
    assert r.status_code == 400 and "changes[0].mig_profile" in r.json(), r.content


def test_queueing_page_buckets_shares_by_gpu_equivalents(api, boss):  # noqa: F811
    """The queueing page's wait-time size buckets count a share as a share (new-user report 3): 0.5 GPU is
    "<1", 3 x 0.5 = 1.5 GPU-equivalents spans 2 GPUs ("2-4"), one whole GPU is "1"; the rows carry the
    GPU-equivalents."""
    from gpuplatform.models import Job
    from gpuplatform.scheduling import store

    for name, role in (("half", {"gpu_fraction": 0.5}), ("threehalves", {"tasks": 3, "gpu_fraction": 0.5}),
                       ("one", {"gpus_per_task": 1})):
        assert submit(api, name, role).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    assert not Job.objects.filter(state="pending").values_list("name", "pending_reason")
    data = boss.get("/queueing/data.json").json()
    csv = boss.get("/queueing/data.json?format=csv").content.decode().splitlines()
    gpus = csv[0].split(",").index("gpus")
    assert sorted(float(line.split(",")[gpus]) for line in csv[1:]) == [0.5, 1, 1.5]
    assert {s["size"]: s["jobs"] for s in data["summary"]} == {"<1": 1, "1": 1, "2-4": 1}
    assert "<1 (1)" in str(data["figures"]["by_size"]["data"])
