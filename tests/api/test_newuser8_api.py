"""New-user trial 8 (notes/newuser8.md), the API's findings: F3 (an answer says which moment each part
shows), F12 (an empty Idempotency-Key), F13 (a member's priority change), F14 (unknown names), F15 (page
JSON endpoints answer 401)."""
from __future__ import annotations

from datetime import datetime

from rest_framework.test import APIClient

from tests.api.helpers_api import job_body


def test_current_metrics_say_which_moment_the_sample_and_the_queue_rows_show(admin, jobs):
    """F3: the sample is the cluster as the latest cycle left it; the queue rows are live. A job that ends
    after the cycle is in the rows only: the answer carries `queues_time` (the clock the rows were read at)
    beside `sample.time`, so the two figures are not one moment's numbers disagreeing."""
    from gpuplatform import services
    from gpuplatform.scheduling import store

    store.run_cycle_once()
    services.cancel_job(jobs["own"], reason="ends after the cycle")
    current = admin.get("/api/v1/cluster-metrics/current/").json()
    assert current["sample"]["allocated_gpus"] == 4 and current["sample"]["cycle"] == 1
    assert {q["queue"]: q["used"] for q in current["queues"]}["root"] in (2, 4)  # live: released or stopping
    rows_at = datetime.fromisoformat(current["queues_time"].replace("Z", "+00:00"))
    assert rows_at >= datetime.fromisoformat(current["sample"]["time"].replace("Z", "+00:00"))


def test_an_empty_idempotency_key_is_a_400_naming_it(client_for):
    """F12: the docs say a key is 1-200 visible characters; an empty (or blank) header must not be taken as
    "no key"."""
    from gpuplatform.models import Job

    member = client_for("member")
    for key in ("", " ", "\t"):
        r = member.post("/api/v1/jobs/", job_body(name="nokey"), format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert r.status_code == 400 and list(r.json()) == ["Idempotency-Key"], (key, r.content)
    assert not Job.objects.filter(name="nokey").exists()


def test_the_log_answer_carries_the_tasks_state(client_for, jobs):
    """F5: the job page's log box said "running" for a pending job: the answer says the task's state."""
    task = jobs["own"].tasks.get()
    r = client_for("member").get(f"/api/v1/jobs/{jobs['own'].pk}/logs/?task={task.pk}")
    assert r.status_code == 200 and r.json()["state"] == "pending" and r.json()["size"] == 0, r.content


def test_a_members_priority_change_names_the_real_rule(client_for, jobs):
    """F13: a member (who may cancel the job) was told "you may not change jobs of this team". The rule is
    that a priority change needs a team admin. The body is read before that rule (new-user trial 24, F7:
    tests/api/test_s24_job_patch_body_first.py), so a wrong type is the same 400 for a member as for a team
    admin; the 403 is for a valid priority change."""
    url = f"/api/v1/jobs/{jobs['own'].pk}/"
    member = client_for("member")
    r = member.patch(url, {"priority": 10}, format="json")
    assert r.status_code == 403, r.content
    assert r.json()["detail"] == ("changing a job's priority needs a team admin of alpha (or a platform admin); "
                                  "members may submit and cancel its jobs")
    for client in (member, client_for("team_admin")):
        r = client.patch(url, {"priority": "x"}, format="json")
        assert r.status_code == 400 and list(r.json()) == ["priority"], r.content
    assert client_for("team_admin").patch(url, {"priority": 10}, format="json").status_code == 200


def test_unknown_names_are_said_as_job_submission_says_them(admin, client_for, users):
    """F14: DRF's "Object with name=nope does not exist." (set-quota, queue creation, memberships) and
    django-filter's "Select a valid choice..." (events ?job=abc) become "unknown queue 'nope'" etc."""
    r = admin.post("/api/v1/quotas/", {"queue": "nope", "flavor": "H100", "quota": 1}, format="json")
    assert r.status_code == 400 and r.json() == {"queue": ["unknown queue 'nope'"]}, r.content
    r = admin.post("/api/v1/queues/", {"name": "q-new", "parent": "root", "team": "nope"}, format="json")
    assert r.status_code == 400 and r.json() == {"team": ["unknown team 'nope'"]}, r.content
    r = admin.post("/api/v1/memberships/", {"team": "alpha", "user": "nobody", "role": "member"}, format="json")
    assert r.status_code == 400 and r.json() == {"user": ["unknown user 'nobody'"]}, r.content
    r = client_for("member").post("/api/v1/jobs/", job_body(team="nope"), format="json")
    assert r.status_code == 400 and r.json() == {"team": ["unknown team 'nope'"]}, r.content
    for value, message in (("abc", "a job id is a whole number"), ("0", "a job id is 1 or more"),
                           ("99999999999999999999", "no job has an id that large")):
        r = admin.get(f"/api/v1/events/?job={value}")
        assert r.status_code == 400 and r.json() == {"job": [message]}, r.content
    assert admin.get("/api/v1/events/?job=123456").json()["count"] == 0


def test_a_job_filter_naming_no_team_or_queue_is_a_400_naming_it(client_for, jobs):
    """F10: /api/v1/jobs/?queue=nope answered 200 count 0 (and gpuctl list --team nope an empty table)."""
    member = client_for("member")
    assert member.get("/api/v1/jobs/?queue=nope").json() == {"queue": ["unknown queue 'nope'"]}
    assert member.get("/api/v1/jobs/?team=nope").json() == {"team": ["unknown team 'nope'"]}
    assert member.get("/api/v1/jobs/?queue=alpha").json()["count"] == 1
    assert member.get("/api/v1/jobs/?queue=beta").json()["count"] == 0  # a queue of another team: none visible
