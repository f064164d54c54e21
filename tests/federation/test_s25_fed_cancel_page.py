"""New-user trial 25 (federation, 1): a federated job can be cancelled on the manager's web page. Its row on
/federation/ has a Cancel form (POST with CSRF, a confirm) for members and admins of its team while it has not
ended; it posts to /jobs/<pk>/cancel/, which on a manager cancels the federated job through the API's service
(federation.manager.cancel_federated_job), then leads back to the row with a message. A viewer sees no button,
and a forged POST is the 403 page."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform.models import Event, FederatedJob

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "alpha", "command": ["sleep", "60"],
       "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 8}]}


def web_as(user):
    web = Client(enforce_csrf_checks=True)
    web.force_login(user)
    return web


def test_a_federated_job_is_cancelled_from_its_row_on_the_federation_page(client_for, users, members):
    jid = client_for("member").post("/api/v1/jobs/", JOB, format="json").json()["id"]
    web = web_as(users["member"])
    page = web.get("/federation/").content.decode()
    form_at = page.index(f'action="/jobs/{jid}/cancel/"')
    form = page[page.rindex("<form", 0, form_at):page.index("</form>", form_at)]
    assert 'method="post"' in form and "csrfmiddlewaretoken" in form and 'data-confirm="Cancel job train?' in form
    assert web.post(f"/jobs/{jid}/cancel/").status_code == 403  # CSRF is checked
    token = web.cookies["csrftoken"].value
    r = web.post(f"/jobs/{jid}/cancel/", {"csrfmiddlewaretoken": token})
    assert r.status_code == 302 and r["Location"] == f"/federation/#fed-job-{jid}"
    assert FederatedJob.objects.get(pk=jid).state == "cancelled"
    assert Event.objects.filter(kind="federation.cancelled").count() == 1  # the API's service, one Event
    page = web.get("/federation/").content.decode()
    assert "Job train cancelled" in page and f'action="/jobs/{jid}/cancel/"' not in page  # ended: no button
    r = web.post(f"/jobs/{jid}/cancel/", {"csrfmiddlewaretoken": token}, follow=True)  # again: a message, no 500
    assert "job is cancelled, not pending or running" in r.content.decode()


def test_a_viewer_sees_no_cancel_button_and_a_forged_post_is_the_403_page(client_for, users, members):
    jid = client_for("member").post("/api/v1/jobs/", JOB, format="json").json()["id"]
    viewer = web_as(users["viewer"])
    page = viewer.get("/federation/").content.decode()
    assert f'id="fed-job-{jid}"' in page and f'action="/jobs/{jid}/cancel/"' not in page
    r = viewer.post(f"/jobs/{jid}/cancel/", {"csrfmiddlewaretoken": viewer.cookies["csrftoken"].value})
    assert r.status_code == 403 and "Only members and admins of the job&#x27;s team may cancel it" in r.content.decode()
    other = web_as(users["other"])  # another team's job: not found, as GET /jobs/<pk>/
    other.get("/federation/")
    assert other.post(f"/jobs/{jid}/cancel/", {"csrfmiddlewaretoken": other.cookies["csrftoken"].value}).status_code == 404
    assert FederatedJob.objects.get(pk=jid).state == "pending"
