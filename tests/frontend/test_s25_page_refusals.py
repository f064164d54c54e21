"""New-user trial 25, A: a page action the user may not take (a viewer's cancel, a submit without a team, a
non-admin's move) answered Django's blank 403 ('<h1>403 Forbidden</h1><p></p>') and logged the refusal's
sentence with a Traceback. It is now the 403 page in the site's layout with that sentence, and the log has one
line without a Traceback (an expected refusal is no error)."""
from __future__ import annotations

import logging

from django.contrib.auth import get_user_model

from gpuplatform.models import Membership


def _no_traceback(caplog):
    return [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()] == []


def test_viewer_cancel_is_a_403_page_with_the_reason(client, world, caplog):
    viewer = get_user_model().objects.create_user("vic", password="pw-vic-12345")
    Membership.objects.create(user=viewer, team=world["red"], role="viewer")
    client.force_login(viewer)
    job = world["jobs"]["red-pending"]
    with caplog.at_level(logging.INFO):
        r = client.post(f"/jobs/{job.pk}/cancel/")
    html = r.content.decode()
    assert r.status_code == 403
    assert "Only members and admins of the job&#x27;s team may cancel it." in html, html
    assert 'class="brand"' in html and "Log out" in html  # the site's layout, signed in
    assert f'href="/jobs/{job.pk}/"' in html  # a way back to the job
    assert _no_traceback(caplog), [r.getMessage() for r in caplog.records]
    job.refresh_from_db()
    assert job.state == "pending"


def test_submit_without_a_team_is_a_403_page_with_the_reason(client, world, caplog):
    loner = get_user_model().objects.create_user("loner", password="pw-loner-12345")
    client.force_login(loner)
    with caplog.at_level(logging.INFO):
        r = client.get("/jobs/new/")
    assert r.status_code == 403
    assert "You are not a member of any team, so you cannot submit jobs." in r.content.decode()
    assert _no_traceback(caplog)


def test_move_by_a_non_admin_is_a_403_page_with_the_reason(client, world, caplog):
    client.force_login(world["alice"])
    with caplog.at_level(logging.INFO):
        r = client.post("/fragmentation/move/", {"beneficiary": "1", "jobs": ["2"]})
    assert r.status_code == 403
    assert "Only platform admins may move other teams&#x27; jobs." in r.content.decode()
    assert _no_traceback(caplog)
