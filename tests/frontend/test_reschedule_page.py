"""The fragmentation page's rescheduling advice and its admin button, and the submit form's rescheduling
fields and shape warning (Django's test client) on the small platform cluster."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from gpuplatform import services
from gpuplatform.models import Event, Job, Membership, Team
from tests.api.test_reschedule_api import _fragmented
from tests.platform.helpers_platform import small_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(db):
    services.load_cluster_spec(small_spec())
    User = get_user_model()
    admin = User.objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    member = User.objects.create_user("mia", password="pw-mia-123")
    Membership.objects.create(user=member, team=Team.objects.get(name="alpha"), role="member")
    return {"admin": admin, "member": member}


def test_fragmentation_page_lists_advice_and_the_button_moves(client, users):
    jobs = _fragmented()
    client.force_login(users["member"])
    html = client.get("/fragmentation/").content.decode()
    assert "for job big (16 GPUs, waiting 3 h)" in html and "Ask to checkpoint and move" not in html
    assert client.post("/fragmentation/move/", {"beneficiary": jobs["big"].pk, "jobs": [jobs["fixed"].pk]}
                       ).status_code == 403
    client.force_login(users["admin"])
    html = client.get("/fragmentation/").content.decode()
    assert "Ask to checkpoint and move" in html
    from gpuplatform.scheduling.advice import fragmentation_advice
    [a] = fragmentation_advice()
    r = client.post("/fragmentation/move/", {"beneficiary": a["beneficiary"], "jobs": [m["job"] for m in a["moves"]]},
                    follow=True)
    assert r.status_code == 200 and "asked to checkpoint and move" in r.content.decode()
    moved = a["moves"][0]["job"]
    assert Job.objects.get(pk=moved).state == "preempting"
    assert Event.objects.get(kind="moved", job_id=moved).actor == users["admin"]
    r = client.post("/fragmentation/move/", {"beneficiary": "x", "jobs": ["1"]}, follow=True)
    assert "must be job ids" in r.content.decode()


def test_submit_form_takes_migration_fields_and_warns_about_a_stranding_shape(client, users):
    client.force_login(users["member"])
    form = {"name": "six", "team": "alpha", "queue": "alpha", "priority": "0", "command": "sleep 60",
            "topology_mode": "none", "preemptible": "on", "migratable": "on", "min_run_before_move_minutes": "10",
            "checkpoint_grace_seconds": "90", "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0",
            "roles-MIN_NUM_FORMS": "1", "roles-MAX_NUM_FORMS": "16", "roles-0-name": "worker", "roles-0-tasks": "2",
            "roles-0-gpus_per_task": "6"}
    r = client.post("/jobs/new/", form, follow=True)
    assert r.status_code == 200, r.content
    job = Job.objects.get(name="six")
    assert (job.migratable, job.min_run_before_move_seconds, job.checkpoint_grace_seconds) == (True, 600, 90)
    html = r.content.decode()
    assert "strands 2 GPU(s) on each node it fills" in html and "as 3 x 4: now" in html and "(12 GPUs, as asked)" in html
    bad = dict(form, name="bad", checkpoint_grace_seconds="0")
    r = client.post("/jobs/new/", bad)
    assert r.status_code == 200 and not Job.objects.filter(name="bad").exists()
    pinned = {k: v for k, v in form.items() if k != "preemptible"}  # unchecked: a migratable job must be preemptible
    r = client.post("/jobs/new/", dict(pinned, name="pinned"))
    assert r.status_code == 200 and "must be preemptible" in r.content.decode()
    assert not Job.objects.filter(name="pinned").exists()
