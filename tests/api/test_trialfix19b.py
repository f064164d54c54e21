"""New-user trial 19, F17 and F19: the logs endpoint's selectors sent empty, and the admin pages' icon."""
from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.parametrize("param", ["task", "attempt"])
def test_a_log_selector_sent_empty_is_a_400_not_the_default(client_for, param):
    """F17: `?task=` read the first task's log (as if left out) while `?task=%20` was a 400: a script whose variable
    was unset read another task's output. A selector sent empty is a 400 naming it; left out, the default holds."""
    from django.utils import timezone

    from gpuplatform.inputs import EMPTY_MESSAGE
    from gpuplatform.models import Task, TaskLog
    from tests.api.helpers_api import job_body

    member = client_for("member")
    job = member.post("/api/v1/jobs/", job_body("logged"), format="json").json()
    task = Task.objects.get(job_id=job["id"])
    TaskLog.objects.create(task=task, attempt=0, offset=0, size=6, data="hello\n", created_at=timezone.now())
    url = f"/api/v1/jobs/{job['id']}/logs/"
    r = member.get(f"{url}?{param}=")
    assert r.status_code == 400, (r.status_code, r.content)
    assert r.json() == {param: [EMPTY_MESSAGE]}, r.json()
    assert member.get(url).json()["data"] == "hello\n"  # left out: the first task, the current attempt
    # trial 20, F2: offset and limit sent empty are that 400 too (they were their defaults)
    assert member.get(f"{url}?offset=&limit=").json() == {"limit": [EMPTY_MESSAGE], "offset": [EMPTY_MESSAGE]}


def test_admin_pages_name_the_site_icon(users):
    """F19: the admin pages named no icon, so the browser asked for /favicon.ico: a 404 in the console of each."""
    page = Client()
    page.force_login(users["staff"])
    r = page.get("/admin/")
    assert r.status_code == 200
    html = r.content.decode()
    assert '<link rel="icon" type="image/svg+xml" href="/static/frontend/favicon.svg">' in html
    assert 'id="site-name"' in html  # the admin's own branding kept


def test_an_admin_cannot_delete_their_own_account_nor_the_last_platform_admin(users):
    """Trial 19b, F11 and F12: "delete selected" of the signed-in admin and a member was a 500 (the second delete's
    Event named the actor deleted just before: a foreign-key error at commit); the admin alone was deleted, and with
    it the last platform admin. Both are refusals now, nothing deleted, never a 500."""
    from django.contrib.auth import get_user_model

    from gpuplatform import services

    User = get_user_model()
    admin, member = users["staff"], users["member"]
    root = User.objects.create_superuser("root", password="pw")
    page = Client()
    page.force_login(root)
    before = User.objects.count()
    r = page.post("/admin/auth/user/", {"action": "delete_selected", "_selected_action": [root.pk, member.pk],
                                        "post": "yes"}, follow=True)
    assert r.status_code == 200 and User.objects.count() == before, r.status_code
    assert "you cannot delete your own account" in r.content.decode()
    assert services.delete_user(root, actor=admin) is True  # another platform admin is left: allowed
    with pytest.raises(services.ValidationError) as exc:
        services.delete_user(admin, actor=admin)
    assert "your own account" in str(exc.value)
    with pytest.raises(services.ValidationError) as exc:  # by someone else: still the last platform admin
        services.delete_user(admin, actor=member)
    assert "last platform admin" in str(exc.value)
    other = User.objects.create_user("ops-admin", password="pw", is_staff=True)
    # session 27 (migration 0034): `admin` is now the actor of root's "user_deleted" Event, history the audit trail
    # keeps: PROTECT refuses the delete (the account is deactivated instead); the last-admin rule passed before it
    with pytest.raises(services.ValidationError) as exc:
        services.delete_user(admin, actor=other)
    assert "cannot be deleted: the audit trail keeps who did what" in str(exc.value), exc.value
    assert services.delete_user(member, actor=other) is True
