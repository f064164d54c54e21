"""New-user trial 14 findings on the API and the jobs page (notes/trial14.md): the states gpuctl shows are the
states the filters take (F12), one text rule for `external_id` (F16), and the smaller disagreements of F22."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplatform import services
from gpuplatform.models import Job, Queue

SLEEP = ["sleep", "3600"]


def _submit(users, name, **extra):
    return services.submit_job(command=SLEEP, team=Queue.objects.get(name="alpha").team, queue="alpha", name=name,
                               roles=[{"tasks": 1, "gpus_per_task": 1}], submitter=users["member"], **extra)


# --- F12: one vocabulary for a stopping job -------------------------------------------------------------------

@pytest.fixture
def stopping(users):
    """alpha's jobs: one stopping toward cancelled, one toward failed (a time limit), one preempted (requeue)."""
    out = {}
    for name, target in (("cancelling", "cancelled"), ("timeout", "failed"), ("evicted", "")):
        job = _submit(users, name)
        Job.objects.filter(pk=job.pk).update(state=Job.State.PREEMPTING, stop_target=target)
        out[name] = job.pk
    out["pending"] = _submit(users, "waiting").pk
    return out


@pytest.mark.parametrize("query, names", [
    ("state=cancelling", {"cancelling"}),
    ("state=stopping", {"timeout"}),
    ("state=preempting", {"cancelling", "timeout", "evicted"}),
    ("state=cancelling&state=pending", {"cancelling", "waiting"}),
])
def test_the_job_filters_take_the_states_gpuctl_shows(client_for, users, stopping, query, names):
    """gpuctl showed "cancelling" for a job the API calls `preempting`, and `?state=cancelling` was a 400 on the
    API and on the jobs page."""
    r = client_for("member").get(f"/api/v1/jobs/?{query}")
    assert r.status_code == 200, r.content
    assert {j["name"] for j in r.json()["results"]} == names
    page = Client()
    page.force_login(users["member"])
    r = page.get(f"/jobs/?{query}")
    assert r.status_code == 200, r.content[:500]
    shown = {Job.objects.get(pk=pk).name for pk in stopping.values() if f'href="/jobs/{pk}/"' in r.content.decode()}
    assert shown == names


def test_gpuctl_state_words_are_filter_values():
    from gpuplatform import cli

    words = {cli._state({"state": "preempting", "stop": {"target": t}}).split(" ")[0]
             for t in ("cancelled", "failed", "succeeded", "restart")}
    assert words == set(Job.STOPPING_WORDS)


def test_an_unknown_state_still_lists_the_choices(client_for, users):
    r = client_for("member").get("/api/v1/jobs/?state=bogus")
    assert r.status_code == 400 and "cancelling" in r.json()["state"][0], r.content


# --- F16: no control characters in external_id ----------------------------------------------------------------

@pytest.mark.parametrize("value", ["a\nb", "a\x1b[31mb", "a\tb", "a\x7fb", "a\x85b"])
def test_external_id_refuses_control_characters(client_for, users, value):
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "p", "external_id": value,
                                                    "command": SLEEP, "roles": [{"name": "w", "tasks": 1}]},
                                  format="json")
    assert r.status_code == 400, r.content
    assert list(r.json()) == ["external_id"] and "control characters" in r.json()["external_id"][0]
    assert not Job.objects.filter(name="p").exists()


def test_external_id_and_working_dir_keep_ordinary_text(client_for, users):
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "p", "external_id": "ci-4711 run ü",
                                                    "working_dir": "/srv/run dir", "command": SLEEP,
                                                    "roles": [{"name": "w", "tasks": 1}]}, format="json")
    assert r.status_code == 201, r.content
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "q", "working_dir": "/srv/a\nb",
                                                    "command": SLEEP, "roles": [{"name": "w", "tasks": 1}]},
                                  format="json")
    assert r.status_code == 400 and "control characters" in r.json()["working_dir"][0], r.content
