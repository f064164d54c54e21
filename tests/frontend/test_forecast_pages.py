"""The forecast on the pages (issue #15): the job page, the jobs list and the queueing page show the
same estimated start in words ("in about 2 h 10 m (90 %: 5 h)"), or "no estimate: <reason>"."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from frontend.templatetags.forecast import estimate_words
from gpuplatform.wording import duration_words
from gpuplatform import clock
from gpuplatform.models import Job
from tests.frontend.conftest import T0


@pytest.fixture
def at_t0():
    clock.use(lambda: T0)
    yield
    clock.use(None)


def test_duration_and_estimate_words():
    assert duration_words(130 * 60) == "2 h 10 m"
    assert duration_words(5 * 3600) == "5 h"
    assert duration_words(45 * 60 + 20) == "45 m"
    assert duration_words(3 * 86400 + 4 * 3600) == "3 d 4 h"
    start, p90 = T0 + timedelta(hours=2, minutes=10), T0 + timedelta(hours=5)
    assert estimate_words(start, p90, "", T0, T0) == "in about 2 h 10 m (90 %: 5 h)"
    assert estimate_words(start, start, "", T0, T0) == "in about 2 h 10 m"
    assert estimate_words(start, None, "", T0, T0) == "in about 2 h 10 m (90 %: beyond the horizon)"
    assert estimate_words(T0, T0, "", T0, T0) == "at the next cycle"
    assert estimate_words(None, None, "not started within the 168 h horizon", T0, T0) == \
        "no estimate: not started within the 168 h horizon"
    assert estimate_words(None, None, "", None, T0) == "estimate pending: the next forecast, within 60 s, gives one"


def test_pages_show_the_same_estimate(client, world, at_t0):
    Job.objects.filter(name="blue-pending").update(
        estimated_start=T0 + timedelta(hours=2, minutes=10), estimated_start_p90=T0 + timedelta(hours=5),
        estimate_note="run time from the queue's recent jobs (12 jobs)", estimated_at=T0)
    Job.objects.filter(name="red-pending").update(estimate_note="not started within the 168 h horizon",
                                                  estimated_at=T0)
    client.force_login(world["admin"])
    text = "in about 2 h 10 m (90 %: 5 h)"
    blue = world["jobs"]["blue-pending"]
    detail = client.get(f"/jobs/{blue.pk}/").content.decode()
    assert f"Estimated start: {text}" in detail and "queue&#x27;s recent jobs (12 jobs)" in detail
    listing = client.get("/jobs/").content.decode()
    assert f"estimated {text}" in listing
    # "estimated" goes before a time only (new-user trial 23: "estimated no estimate: can never start: ...")
    assert "no estimate: not started within the 168 h horizon" in listing and "estimated no estimate" not in listing
    queueing = client.get("/queueing/").content.decode()
    assert text in queueing and "no estimate: not started within the 168 h horizon" in queueing
    red = world["jobs"]["red-pending"]
    assert "no estimate: not started within the 168 h horizon" in client.get(f"/jobs/{red.pk}/").content.decode()
    api = client.get(f"/api/v1/jobs/{blue.pk}/").json()
    assert api["estimated_start"].startswith("2017-10-09T10:10") and api["estimated_start_p90"].startswith(
        "2017-10-09T13:00")
    assert api["estimate_note"] == "run time from the queue's recent jobs (12 jobs)"


def _form(queue="red", tasks="1", gpus="2", **extra):
    data = {"queue": queue, "roles-TOTAL_FORMS": "1", "roles-0-name": "worker", "roles-0-tasks": tasks,
            "roles-0-gpus_per_task": gpus, "priority": "0", "preemptible": "on"}  # the form's default (checked)
    data.update(extra)
    return data


def test_submit_form_estimate_before_submitting(client, world, at_t0):
    """The form's "Estimate start": a hypothetical submission, answered in words; nothing is written."""
    client.force_login(world["alice"])
    jobs = Job.objects.count()
    r = client.post("/jobs/new/estimate/", _form(gpus="2"))
    assert r.status_code == 200 and r.json()["text"] == "would start at the next cycle"  # 4 GPUs are free
    # 8 GPUs: after red-running (started T0 + 1 min, no history: 1 h assumed) ends at T0 + 61 min; the
    # forecast's steps grow by 5 % of the lead time (forecast.resolution), so up to ~3 min later
    r = client.post("/jobs/new/estimate/", _form(gpus="8"))
    assert r.status_code == 200 and r.json()["text"].startswith("would start in about 1 h "), r.json()
    start = datetime.fromisoformat(r.json()["estimated_start"])
    assert T0 + timedelta(minutes=61) <= start <= T0 + timedelta(minutes=61 * 1.05)
    assert Job.objects.count() == jobs
    r = client.post("/jobs/new/estimate/", _form(tasks="", gpus="x"))
    assert r.status_code == 400 and set(r.json()["errors"]) == {"roles-0-tasks", "roles-0-gpus_per_task"}
    assert client.post("/jobs/new/estimate/", _form(queue="blue")).status_code == 403  # not alice's team
    # a rule the what-if applies is filed under the form's own field (new-user trial 14, F1 / F13: "time_limit")
    r = client.post("/jobs/new/estimate/", _form(time_limit_minutes="1000000"))
    assert r.status_code == 400 and list(r.json()["errors"]) == ["time_limit_minutes"], r.json()
    assert "366 days" in r.json()["errors"]["time_limit_minutes"]
    r = client.post("/jobs/new/estimate/", _form(gpus="0", **{"roles-0-gpu_fraction": "1.5"}))
    assert r.status_code == 400 and list(r.json()["errors"]) == ["roles-0-gpu_fraction"], r.json()
    html = client.get("/jobs/new/").content.decode()
    assert 'id="estimate-start"' in html and "/jobs/new/estimate/" in html


def test_queues_page_offers_the_quota_what_if_to_admins_only(client, world):
    client.force_login(world["admin"])
    html = client.get("/queues/").content.decode()
    assert 'id="quota-try-form"' in html and 'data-url="/api/v1/forecast/"' in html and "quota_try.js" in html
    # what the page's script sends, the API answers with a row per pending team queue (red's quota 2: at 8 the two
    # queues under root, a grouping node, would claim 12 of the cluster's 8 GPUs, which the quota rules refuse)
    r = client.post("/api/v1/forecast/", {"changes": [{"kind": "set_quota", "queue": "red", "flavor": "P100",
                                                        "quota": 2}]}, content_type="application/json")
    assert r.status_code == 200 and {q["queue"] for q in r.json()["queues"]} == {"red", "blue"}
    client.force_login(world["alice"])
    assert 'id="quota-try-form"' not in client.get("/queues/").content.decode()


def test_queueing_page_plots_the_committed_accuracy_figures(client, world, settings, tmp_path):
    import json

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    settings.BASE_DIR = tmp_path
    client.force_login(world["admin"])
    assert "No accuracy figures yet" in client.get("/queueing/").content.decode()
    fig = {"predictions": 10, "with_estimate": 8, "median_abs_error_s": 600.0, "p90_abs_error_s": 5400.0,
           "share_within_15min": 0.5, "share_within_25pct_of_wait": 0.4, "share_started_by_p90": 0.9,
           "median_signed_error_s": 0.0}
    run = {"resolved": 10, "points": [[1.0, 1.5], [2.0, 1.0]], "forecast": fig, "backfill_reservation": fig,
           "no_estimate": fig}
    (tmp_path / "benchmarks" / "results" / "forecast_accuracy_full.json").write_text(json.dumps(
        {"start_day": 20, "days": 30, "runs": {"without_time_limits": run, "with_time_limits": run}}))
    html = client.get("/queueing/").content.decode()
    assert 'id="fig-forecast_accuracy"' in html and "5400 s" in html and "exact time limits" in html
    initial = html.split('<script id="initial-figures" type="application/json">')[1].split("</script>")[0]
    assert json.loads(initial)["forecast_accuracy"]["data"][0]["x"] == [1.0, 2.0]  # the plot has data
    # drawn once from the page: the 5 s poll does not carry the (static, ~50 KB) figure again
    assert "forecast_accuracy" not in client.get("/queueing/data.json").json()["figures"]


def test_an_estimate_already_in_the_past_reads_overdue_not_the_next_cycle():
    """The demo's clock runs 600x: an estimate made hours of cluster time ago may lie in the past. It is
    shown as overdue with its age, never as "at the next cycle" (new-user trial 7, F7)."""
    start = T0 - timedelta(hours=7)
    words = estimate_words(start, start + timedelta(minutes=5), "", start - timedelta(minutes=5), T0)
    assert "next cycle" not in words and words.startswith("overdue"), words
    assert "7 h" in words and "7 h 5 m" in words  # due 7 h ago; forecast made 7 h 5 m ago
    assert estimate_words(T0 - timedelta(seconds=30), None, "", T0 - timedelta(minutes=1), T0).startswith(
        "at the next cycle")  # within a cycle: still "next cycle"
