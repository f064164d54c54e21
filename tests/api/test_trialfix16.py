"""New-user trial 16 findings on the API (notes/trial16.md): the what-if's default hypothetical id (F1), one wording
and one range for a GPU share (F2), an error on the parameter sent (F8), a priority set to its value (F10). The
concurrency findings (F3, F4, F5, F13) are in test_queue_tree_lock.py; F14 in tests/platform/test_commands_hygiene.py."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import clock, services
from gpuplatform.models import Event, Job, Queue
from tests.api.helpers_api import job_body

# --- F1: the what-if's default id --------------------------------------------------------------------------------


def test_an_unnamed_hypothetical_job_does_not_take_the_id_another_change_chose(admin, cluster):
    """changes[1] sent no id; its default, hypothetical-2, was the one changes[0] chose: a 400 on changes[1].id."""
    changes = [{"kind": "submit", "queue": "alpha", "tasks": 1, "id": "hypothetical-2"},
               {"kind": "submit", "queue": "alpha", "tasks": 1},
               {"kind": "submit", "queue": "alpha", "tasks": 1, "id": "hypothetical-3"},
               {"kind": "submit", "queue": "alpha", "tasks": 1}]
    r = admin.post("/api/v1/forecast/", {"changes": changes}, format="json")
    assert r.status_code == 200, r.content
    names = sorted(j["name"] for j in r.json()["jobs"] if j.get("hypothetical"))
    assert names == ["hypothetical-2", "hypothetical-3", "hypothetical-4", "hypothetical-5"], r.json()["jobs"]
    r = admin.post("/api/v1/forecast/", {"changes": [changes[0], changes[0]]}, format="json")  # the user's own clash
    assert r.status_code == 400 and "changes[1].id" in r.json(), r.content


def test_submit_ids_are_unique_and_keep_the_given_ones():
    from scheduler.forecast.whatif import submit_ids

    changes = [{"kind": "submit"}, {"kind": "set_weight"}, {"kind": "submit", "id": "hypothetical-1"},
               {"kind": "submit"}, {"kind": "submit", "id": "hypothetical-4"}, {"kind": "submit"}]
    ids = submit_ids(changes)
    assert ids == {0: "hypothetical-2", 2: "hypothetical-1", 3: "hypothetical-5", 4: "hypothetical-4",
                   5: "hypothetical-6"}
    assert len(set(ids.values())) == len(ids)


# --- F2: one rule, one wording, one range --------------------------------------------------------------------------

SHARE_RULE = "a fraction of one GPU from 0.001 to 0.999 with at most three decimals"


@pytest.mark.parametrize("field, value", [
    ("gpus_per_task", 0.0001), ("gpus_per_task", 1.5), ("gpus_per_task", True), ("gpus_per_task", 0.0015),
    ("gpus_per_task", 0.9995), ("gpu_fraction", 0.0015), ("gpu_fraction", 1.5), ("gpu_fraction", 0),
])
def test_a_gpu_share_is_refused_with_one_wording_and_its_real_bounds(admin, field, value):
    body = job_body(name="share")
    body["roles"][0][field] = value
    r = admin.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    (message,) = r.json()[f"roles[0].{field}"]
    assert message.startswith(field) and SHARE_RULE in message, message
    assert not Job.objects.filter(name="share").exists()


@pytest.mark.parametrize("value, milli", [(0.25, 250), (0.001, 1), (0.999, 999), (0.1, 100), (0.123, 123)])
def test_a_share_of_at_most_three_decimals_is_stored_as_asked(admin, value, milli):
    assert admin.post("/api/v1/nodes/n0/sharing/", {"sharing": "shared"}, format="json").status_code == 200
    body = job_body(name="share")
    body["roles"][0]["gpus_per_task"] = value
    r = admin.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["gpu_request"] == f"1x{value:g}" and Job.objects.get(name="share").roles.get().gpu_milli == milli


def test_the_what_if_refuses_a_share_with_the_same_words(admin, cluster):
    r = admin.post("/api/v1/forecast/", {"changes": [{"kind": "submit", "queue": "alpha", "tasks": 1,
                                                       "gpus_per_task": 0.0015}]}, format="json")
    assert r.status_code == 400 and SHARE_RULE in str(r.json()), r.content


# --- F8: the error on the parameter sent ----------------------------------------------------------------------------

def test_an_until_past_a_day_after_the_clock_is_refused_on_until(admin, cluster):
    now = datetime(2026, 12, 3, 7, 0, tzinfo=tz.utc)
    clock.use(lambda: now)
    try:
        r = admin.get("/api/v1/utilization/", {"until": "9999-01-01T00:00:00Z"})
        assert r.status_code == 400 and list(r.json()) == ["until"], r.content
        assert "since defaults to until - 1 day" in r.json()["until"][0]
        r = admin.get("/api/v1/utilization/", {"since": (now + timedelta(hours=1)).isoformat(),
                                               "until": (now + timedelta(hours=2)).isoformat()})
        assert r.status_code == 400 and list(r.json()) == ["since"], r.content
        r = admin.get("/api/v1/utilization/", {"until": (now + timedelta(hours=12)).isoformat()})
        assert r.status_code == 200, r.content  # since = until - 1 day is before the clock: answered up to it
    finally:
        clock.use(None)


# --- F10: a priority set to its value --------------------------------------------------------------------------------

def test_a_priority_set_to_the_value_it_has_writes_nothing(admin, users):
    job = services.submit_job(command=["sleep", "1"], team=Queue.objects.get(name="alpha").team, queue="alpha",
                              name="same", roles=[{"tasks": 1, "gpus_per_task": 1}], priority=0)
    r = admin.patch(f"/api/v1/jobs/{job.pk}/", {"priority": 0}, format="json")
    assert r.status_code == 200 and r.json()["priority"] == 0, r.content
    assert not Event.objects.filter(kind="priority_changed", job=job).exists()
    r = admin.patch(f"/api/v1/jobs/{job.pk}/", {"priority": 3}, format="json")
    assert r.status_code == 200 and r.json()["priority"] == 3, r.content
    assert list(Event.objects.filter(kind="priority_changed", job=job).values_list("message", flat=True)) == [
        "same: priority 0 -> 3"]


# --- F7: the shape check by submission's rules ----------------------------------------------------------------------

def test_the_shape_check_takes_a_share_and_answers_for_the_whole_gpu_roles(admin):
    """gpus_per_task 0.5, which submission takes, was "must be a whole number" here; a share strands nothing."""
    assert admin.post("/api/v1/nodes/n0/sharing/", {"sharing": "shared"}, format="json").status_code == 200
    r = admin.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 1, "gpus_per_task": 0.5}]},
                   format="json")
    assert r.status_code == 200 and r.json() == [], r.content
    roles = [{"name": "t", "tasks": 2, "gpus_per_task": 6}, {"name": "w", "tasks": 2, "gpus_per_task": 0.25}]
    r = admin.post("/api/v1/shape-check/", {"queue": "alpha", "roles": roles}, format="json")
    assert r.status_code == 200, r.content
    [a] = r.json()
    assert a["role"] == "t" and a["suggested"] == {"tasks": 3, "gpus_per_task": 4}  # 12 GPUs as asked
    assert a["estimated_start"] == {"asked": "now", "suggested": "now"}
    r = admin.post("/api/v1/shape-check/", {"queue": "alpha", "roles": [{"tasks": 1, "gpus_per_task": 0.0015}]},
                   format="json")
    assert r.status_code == 400 and SHARE_RULE in r.json()["roles[0].gpus_per_task"][0], r.content


@pytest.mark.parametrize("tier, status, words", [
    (99, 400, "no such tier in this cluster: 99"),
    (40000, 400, "tier must be between 1 and 32767"),
    ("tier-99", 400, "no such tier in this cluster: 99"),
    ("wide", 400, "unknown tier name 'wide'"),
    ("nvlink", 200, None),
    (2, 200, None),
])
def test_the_shape_checks_highest_tier_is_submissions(admin, tier, status, words):
    r = admin.post("/api/v1/shape-check/", {"queue": "alpha", "topology_mode": "hard", "highest_tier": tier,
                                            "roles": [{"tasks": 2, "gpus_per_task": 6}]}, format="json")
    assert r.status_code == status, r.content
    if words:
        assert words in r.json()["highest_tier"][0], r.content
