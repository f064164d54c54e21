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
             for t in ("cancelled", "failed", "succeeded", "restart", "recover")}
    assert words == set(Job.STOPPING_WORDS)
    # every target a word stands for reads as that word, and no other target does (session 21: "recover", a gang
    # broken by a fault, read as plain "preempting")
    for word, targets in Job.STOPPING_WORDS.items():
        for t in targets:
            assert cli._state({"state": "preempting", "stop": {"target": t}}).split(" ")[0] == word
    assert cli._state({"state": "preempting", "stop": {"target": "requeue"}}) == "preempting"


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
    # the one-line rule since trial 26, F5 ("... without a newline, a tab or another control character ...")
    assert list(r.json()) == ["external_id"] and "control character" in r.json()["external_id"][0]
    assert not Job.objects.filter(name="p").exists()


def test_external_id_and_working_dir_keep_ordinary_text(client_for, users):
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "p", "external_id": "ci-4711 run ü",
                                                    "working_dir": "/srv/run dir", "command": SLEEP,
                                                    "roles": [{"name": "w", "tasks": 1}]}, format="json")
    assert r.status_code == 201, r.content
    r = client_for("member").post("/api/v1/jobs/", {"queue": "alpha", "name": "q", "working_dir": "/srv/a\nb",
                                                    "command": SLEEP, "roles": [{"name": "w", "tasks": 1}]},
                                  format="json")
    assert r.status_code == 400 and "control character" in r.json()["working_dir"][0], r.content


# --- F22: the time range message, offset, "1 GPU", a second cancel --------------------------------------------

@pytest.mark.parametrize("url, param", [("/api/v1/events/?since=99999-01-01", "since"),
                                        ("/api/v1/jobs/?submitted_after=123456-01-01T00:00:00Z", "submitted_after"),
                                        ("/api/v1/events/?until=%2B10000-01-01", "until")])
def test_a_year_past_9999_gets_the_range_message(client_for, users, url, param):
    r = client_for("member").get(url)
    assert r.status_code == 400 and r.json() == {param: [
        "date-time out of range: must be from 1970-01-01T00:00:00Z to 9999-01-01T00:00:00Z"]}, r.content


def test_a_time_param_view_gives_the_range_message_too(client_for, users):
    r = client_for("member").get("/api/v1/utilization/?since=99999-01-01")
    assert r.status_code == 400 and "date-time out of range" in r.json()["since"][0], r.content


def test_offset_is_taken_where_the_docs_say(client_for, users):
    """docs/api.md: every list takes `offset` but the jobs and events lists, which page by cursor."""
    api = client_for("member")
    assert api.get("/api/v1/queues/?offset=1").status_code == 200
    for url in ("/api/v1/jobs/?offset=5", "/api/v1/events/?offset=5"):
        r = api.get(url)
        assert r.status_code == 400 and "unknown query parameter" in r.json()["offset"][0], (url, r.content)
    from pathlib import Path
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs/api.md").read_text().split())
    assert "except the jobs and events lists, which page by `cursor`" in docs


def test_one_gpu_is_one_gpu(users):
    from gpuplatform.models import Event
    from gpuplatform.wording import count

    assert [count(1, "GPU"), count(2, "GPU"), count(0, "GPU"), count(0.5, "GPU"), count(1, "node")] == \
        ["1 GPU", "2 GPUs", "0 GPUs", "0.5 GPUs", "1 node"]
    job = _submit(users, "one")
    assert Event.objects.get(job=job, kind="submitted").message == "one submitted to alpha: 1 GPU"


def test_an_admitted_event_counts_nodes_and_gpus_in_words(users):
    from types import SimpleNamespace

    from gpuplatform.scheduling.store import _admitted_event

    binding = SimpleNamespace(job_id=1, rule="allocate", domain="nvl-0", tier=1, share_before=0, share_after=0.1,
                              tasks=[SimpleNamespace(role="w", index=0, node="n0", gpus=(0,), gpu_milli=0, mig=())])
    message = _admitted_event(binding, None, 1, 1, 1)["message"]
    assert "on 1 node, 1 GPU" in message, message


def test_a_second_cancel_is_a_400_naming_state_as_documented(client_for, users):
    api = client_for("member")
    job = _submit(users, "twice")
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json").status_code == 200
    r = api.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json")
    assert r.status_code == 400 and r.json() == {"state": ["job is cancelled, not pending or running"]}, r.content
    from pathlib import Path
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs/api.md").read_text().split())
    assert "A request that conflicts with an object's current state is a 400 naming `state`" in docs
