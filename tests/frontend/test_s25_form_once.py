"""New-user trial 25, D: the same /jobs/new/ form body POSTed twice at once made two jobs. The form carries a
one-time token (hidden field submit_token); a second POST with it is sent to the job the first one made, nothing
new submitted (the API's Idempotency-Key store, per user). The token with other values is the form again with an
error and a fresh token; a POST without a token (a script) submits as before."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from gpuplatform.models import Job
from tests.api.helpers_api import at_once
from tests.frontend.test_dashboards import roles_post


def _token(html: str) -> str:
    m = re.search(r'name="submit_token" value="([0-9a-f]{32})"', html)
    assert m, "no submit_token on the form"
    return m.group(1)


def test_the_form_posted_twice_with_its_token_makes_one_job(client, world):
    client.force_login(world["alice"])
    token = _token(client.get("/jobs/new/").content.decode())
    first = client.post("/jobs/new/", roles_post(submit_token=token))
    job = Job.objects.get(name="train-1")
    assert first.status_code == 302 and first["Location"] == f"/jobs/{job.pk}/"
    second = client.post("/jobs/new/", roles_post(submit_token=token), follow=True)
    assert Job.objects.filter(name="train-1").count() == 1
    assert second.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert "already submitted; nothing new was submitted" in second.content.decode()
    # another form (another token) submits again
    again = client.post("/jobs/new/", roles_post(submit_token=_token(client.get("/jobs/new/").content.decode())))
    assert again.status_code == 302 and Job.objects.filter(name="train-1").count() == 2


def test_the_token_with_other_values_is_the_form_with_an_error_and_a_fresh_token(client, world):
    client.force_login(world["alice"])
    token = _token(client.get("/jobs/new/").content.decode())
    assert client.post("/jobs/new/", roles_post(submit_token=token)).status_code == 302
    changed = client.post("/jobs/new/", roles_post(submit_token=token, name="train-2"))
    html = changed.content.decode()
    assert changed.status_code == 200 and "This form was already submitted" in html
    assert not Job.objects.filter(name="train-2").exists()
    fresh = _token(html)
    assert fresh != token
    assert client.post("/jobs/new/", roles_post(submit_token=fresh, name="train-2")).status_code == 302
    assert Job.objects.filter(name="train-2").count() == 1


def test_a_post_without_a_token_submits_as_before(client, world):
    client.force_login(world["alice"])
    assert client.post("/jobs/new/", roles_post()).status_code == 302
    assert client.post("/jobs/new/", roles_post()).status_code == 302
    assert Job.objects.filter(name="train-1").count() == 2


def test_an_invalid_form_keeps_its_values_and_gets_a_fresh_token(client, world):
    client.force_login(world["alice"])
    token = _token(client.get("/jobs/new/").content.decode())
    bad = client.post("/jobs/new/", roles_post(submit_token=token, **{"roles-0-tasks": "0"}))
    assert bad.status_code == 200 and not Job.objects.filter(name="train-1").exists()
    fixed = client.post("/jobs/new/", roles_post(submit_token=_token(bad.content.decode())))
    assert fixed.status_code == 302 and Job.objects.filter(name="train-1").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_posts_of_one_form_at_once_make_one_job(transactional_db, world):
    clients = [Client(), Client()]
    for c in clients:
        c.force_login(world["alice"])
    token = _token(clients[0].get("/jobs/new/").content.decode())
    answers = at_once([lambda c=c: c.post("/jobs/new/", roles_post(submit_token=token)) for c in clients])
    assert all(a is not None and a.status_code == 302 for a in answers), [getattr(a, "content", a) for a in answers]
    job = Job.objects.get(name="train-1")
    assert {a["Location"] for a in answers} == {f"/jobs/{job.pk}/"}
