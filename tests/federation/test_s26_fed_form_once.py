"""The submit form's one-time token on a federation manager: /jobs/new/ there submits a FederatedJob
(views_jobs._submit_federated); a second POST of the same form (its submit_token) is sent to the job the first one
made, nothing new submitted, as on a worker (once_per_form_token, tests/frontend/test_s25_form_once.py)."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform.models import FederatedJob, Job
from tests.api.helpers_api import at_once
from tests.federation.test_front_door import form_post
from tests.frontend.test_s25_form_once import _token

pytestmark = pytest.mark.django_db


def test_the_manager_form_posted_twice_with_its_token_makes_one_federated_job(users, members):
    web = Client()
    web.force_login(users["member"])
    token = _token(web.get("/jobs/new/").content.decode())
    first = web.post("/jobs/new/", form_post(submit_token=token))
    assert first.status_code == 302, first.content.decode()[:2000]
    job = FederatedJob.objects.get(name="train-1")
    assert first["Location"] == f"/federation/#fed-job-{job.pk}"
    second = web.post("/jobs/new/", form_post(submit_token=token), follow=True)
    assert FederatedJob.objects.filter(name="train-1").count() == 1 and not Job.objects.exists()
    assert second.redirect_chain == [(f"/federation/#fed-job-{job.pk}", 302)]
    assert "already submitted; nothing new was submitted" in second.content.decode()
    # the same token with other values: the form again with an error and a fresh token, nothing submitted
    changed = web.post("/jobs/new/", form_post(submit_token=token, name="train-2"))
    html = changed.content.decode()
    assert changed.status_code == 200 and "This form was already submitted" in html
    assert not FederatedJob.objects.filter(name="train-2").exists() and _token(html) != token
    # another form (another token) submits again
    again = web.post("/jobs/new/", form_post(submit_token=_token(web.get("/jobs/new/").content.decode())))
    assert again.status_code == 302 and FederatedJob.objects.filter(name="train-1").count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_posts_of_one_manager_form_at_once_make_one_federated_job(transactional_db, users, members):
    clients = [Client(), Client()]
    for c in clients:
        c.force_login(users["member"])
    token = _token(clients[0].get("/jobs/new/").content.decode())
    answers = at_once([lambda c=c: c.post("/jobs/new/", form_post(submit_token=token)) for c in clients])
    assert all(a is not None and a.status_code == 302 for a in answers), [getattr(a, "content", a) for a in answers]
    job = FederatedJob.objects.get(name="train-1")
    assert {a["Location"] for a in answers} == {f"/federation/#fed-job-{job.pk}"}
