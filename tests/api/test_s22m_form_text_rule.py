"""Trial 22, F3: the admin's queue form trimmed a trailing "\\n" from a queue name silently (and so did the API: a
name is one line, and "alpha\\n" was taken as "alpha"), while the API refused U+202E with its text rule and the form
with the name rule's words. One text rule (inputs.text_rule_error) now runs on the text as sent in both: a name is
one line (no newline, tab or other control character), other text the free-text rule, text of only white space is
refused; the web forms show the refusal on the field."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from gpuplatform.inputs import ONE_LINE_RULE
from gpuplatform.models import Job, Queue, Team

pytestmark = pytest.mark.django_db

ADD = "/admin/gpuplatform/queue/add/"


def field_errors(response, field: str) -> list[str]:
    """The error list Django's admin shows above `field` (its errorlist <ul> carries the field's id)."""
    import html

    text = response.content.decode()
    block = re.search(rf'<ul class="errorlist"[^>]*id="id_{field}_error"[^>]*>(.*?)</ul>', text, re.S)
    return [html.unescape(m) for m in re.findall(r"<li>(.*?)</li>", block.group(1), re.S)] if block else []


@pytest.fixture
def site_admin(client, users):
    user = get_user_model().objects.create_superuser("root", password="pw")
    client.force_login(user)
    return client


def queue_form(name: str) -> dict:
    root = Queue.objects.filter(parent__isnull=True).first()
    return {"name": name, "parent": root.pk, "weight": "1", "state": "open", "preemption_grace_seconds": "30",
            "version": ""}


@pytest.mark.parametrize("name, shown", [("gamma\n", "'\\n' at character 6"), ("gamma\t", "'\\t' at character 6"),
                                         ("\ngamma", "'\\n' at character 1"), ("ga\u202emma", "'\\u202e' at character 3")])
def test_the_queue_form_and_the_api_refuse_a_name_with_a_control_character_alike(site_admin, admin, name, shown):
    r = site_admin.post(ADD, queue_form(name))
    assert r.status_code == 200, r.status_code  # the form again, not a redirect to the list
    assert field_errors(r, "name") == [ONE_LINE_RULE + shown], field_errors(r, "name")
    api = admin.post("/api/v1/queues/", {"name": name, "parent": Queue.objects.filter(parent__isnull=True).first().name},
                     format="json")
    assert api.status_code == 400 and api.json() == {"name": [ONE_LINE_RULE + shown]}, api.content
    assert not Queue.objects.filter(name="gamma").exists()


def test_a_name_as_typed_is_still_taken(site_admin):
    r = site_admin.post(ADD, queue_form("gamma"))
    assert r.status_code == 302, field_errors(r, "name")
    assert Queue.objects.filter(name="gamma").exists()


def test_the_team_form_too_and_its_description_keeps_its_own_rule(site_admin, users):
    team = Team.objects.get(name="alpha")
    change = f"/admin/gpuplatform/team/{team.pk}/change/"
    page = site_admin.get(change).content.decode()
    slug = re.search(r'name="slug"[^>]*value="([^"]*)"', page)
    data = {"name": "alpha\n", "slug": slug.group(1) if slug else team.slug, "description": "  \n ",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}
    r = site_admin.post(change, data)
    assert r.status_code == 200 and field_errors(r, "name") == [ONE_LINE_RULE + "'\\n' at character 6"]
    r = site_admin.post(change, {**data, "name": "alpha"})
    assert r.status_code == 302, re.findall(r"errorlist[^>]*>(.*?)</ul>", r.content.decode(), re.S)  # a description of only white space is stored as "" (trial 20)
    assert Team.objects.get(pk=team.pk).description == ""


def _job_form(**extra):
    team = Team.objects.get(name="alpha")
    return {"name": "j1", "team": team.name, "queue": "alpha", "priority": "0", "command": "sleep 60",
            "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
            "roles-MAX_NUM_FORMS": "20", "roles-0-name": "worker", "roles-0-tasks": "1", "roles-0-gpus_per_task": "1",
            **extra}


@pytest.mark.parametrize("field, value, rule", [("name", "j1\n", ONE_LINE_RULE + "'\\n' at character 3"),
                                                ("roles-0-name", "worker\n", ONE_LINE_RULE + "'\\n' at character 7"),
                                                ("image", "nvcr.io/x\u202e:1",
                                                 ONE_LINE_RULE + "'\\u202e' at character 10"),
                                                ("image", " \n", "must not be only white space: give a value, or "
                                                                 "leave the field empty")])
def test_the_job_form_refuses_what_the_api_refuses_on_the_field(client, users, field, value, rule):
    client.force_login(users["member"])
    r = client.post("/jobs/new/", _job_form(**{field: value}))
    assert r.status_code in (200, 400), r.status_code
    text = r.content.decode()
    import html

    assert rule in html.unescape(text), re.findall(r'class="errorlist[^>]*>(.*?)</ul>', text, re.S)
    assert not Job.objects.exists()
