"""New-user trial 26, finding 6: `gpuctl list -o wide` gave one pending job two start estimates in one line: "1st in
queue: starts in about 45 s; ...; reserved, estimated start 2026-12-04T19:52:46Z" (the forecast's 45 s against the
cycle's reservation 12 s later; it started at 19:52:46), and "estimate pending: the next forecast, within 60 s, gives
one; ...; reserved, estimated start ..." (pending and an estimate together). When the last cycle's reservation has an
estimated start (Job.reservation_start, the time its reason names), that is the job's estimate, in the API and the
pages alike (scheduling.forecast.shown_estimate); the forecast's is shown only without one."""
from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client

from gpuplatform import clock
from gpuplatform.cli import _job_line
from gpuplatform.models import Job

pytestmark = pytest.mark.django_db


def iso(when) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def reserved(job: Job, *, forecast_in: float | None, reserved_in: float) -> tuple:
    """The job as the forecast and then a cycle left it: the forecast's start `forecast_in` seconds from now (None:
    not forecast yet), the cycle's reservation `reserved_in` seconds from now, named in the reason."""
    now = clock.now().replace(microsecond=0)
    forecast = now + timedelta(seconds=forecast_in) if forecast_in is not None else None
    reservation = now + timedelta(seconds=reserved_in)
    Job.objects.filter(pk=job.pk).update(
        estimated_start=forecast, estimated_start_p90=forecast and forecast + timedelta(seconds=600),
        estimate_note="run time from no history yet (1 h assumed)" if forecast else "",
        estimated_at=now if forecast else None, reservation_start=reservation, queue_position=1,
        pending_reason=f"needs 2 H100 GPUs at once; reserved, estimated start {iso(reservation)}",
        pending_reason_code="insufficient_gpus")
    return now, reservation


def line(admin, job: Job, now) -> str:
    return _job_line(admin.get(f"/api/v1/jobs/{job.pk}/").json(), now)[-1]


@pytest.mark.parametrize("forecast_in", [45, None, 3600])
def test_the_cycles_reservation_is_the_one_estimate_of_the_api_and_gpuctl(admin, jobs, forecast_in):
    job = jobs["own"]
    now, reservation = reserved(job, forecast_in=forecast_in, reserved_in=12)
    body = admin.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["estimated_start"].replace("+00:00", "Z").startswith(iso(reservation)), body["estimated_start"]
    assert "estimate pending" not in body["estimate_note"] and "no history" not in body["estimate_note"], body
    listed = [j for j in admin.get("/api/v1/jobs/", {"state": "pending"}).json()["results"] if j["id"] == job.pk][0]
    assert listed["estimated_start"] == body["estimated_start"]
    text = line(admin, job, now)
    assert text.startswith("1st in queue: starts in about 12 s; "), text
    assert "45 s" not in text and "estimate pending" not in text and "1 h" not in text, text


def test_without_a_reservation_the_forecast_is_the_estimate_as_before(admin, jobs):
    job = jobs["own"]
    now, _ = reserved(job, forecast_in=45, reserved_in=12)
    Job.objects.filter(pk=job.pk).update(reservation_start=None, pending_reason="needs 2 H100 GPUs at once")
    text = line(admin, job, now)
    assert text.startswith("1st in queue: starts in about 45 s (90 %: 11 m; run time assumed: no history)"), text
    Job.objects.filter(pk=job.pk).update(estimated_start=None, estimated_start_p90=None, estimate_note="",
                                         estimated_at=None)
    assert line(admin, job, now).startswith("1st in queue: estimate pending: the next forecast")


def test_the_pages_say_the_same_estimate(users, jobs):
    job = jobs["own"]
    reserved(job, forecast_in=None, reserved_in=12)
    page = Client()
    page.force_login(users["staff"])
    detail = page.get(f"/jobs/{job.pk}/").content.decode()
    assert "Estimated start: at the next cycle" in detail or "Estimated start: in about 1" in detail, detail
    assert "estimate pending" not in detail
    rows = list(csv.DictReader(io.StringIO(page.get("/queueing/data.json",
                                                    {"format": "csv", "table": "pending"}).content.decode())))
    row = [r for r in rows if r["name"] == job.name][0]
    reservation = Job.objects.get(pk=job.pk).reservation_start
    assert row["estimated_start"][:19].replace(" ", "T") == iso(reservation)[:19], row
    assert "estimate pending" not in row["estimate_note"], row
    queueing = page.get("/queueing/").content.decode()
    row = next(r for r in queueing.split("<tr") if f">{job.name}<" in r or f"#{job.pk}<" in r)
    assert "estimate pending" not in row and "estimated " in row, row
