"""Session 27, an admin's trial (item 1): unticking "Active" on the Django admin's user change page recorded no Event,
so deactivations (the way to retire an account with history, which is never deleted: services.delete_user) were
missing from the audit log; and the last active platform admin could be deactivated, leaving nobody to administer the
platform. The admin's save now goes through services.tenancy.set_user_active: "user_deactivated" /
"user_reactivated", the admin as actor; the last active platform admin (staff or superuser) is refused in
delete_user's words."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from gpuplatform import services
from gpuplatform.models import Event
from gpuplatform.services.tenancy import set_user_active

pytestmark = pytest.mark.django_db

LAST_ADMIN = "is the last platform admin (staff or superuser): make another first"


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _change_data(page: Client, user) -> dict:
    """The change page's form as the browser would post it (every field as shown)."""
    form = page.get(f"/admin/auth/user/{user.pk}/change/").context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name == "password":
            continue
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif isinstance(value, (list, tuple)):
            data[name] = [getattr(v, "pk", v) for v in value]
        elif value is not None:
            data[name] = value.isoformat(sep=" ").split(".")[0].split("+")[0] if hasattr(value, "isoformat") else value
    for key in ("last_login", "date_joined"):  # split date/time widgets
        value = form.initial.get(key)
        data.pop(key, None)
        if value is not None:
            data[f"{key}_0"], data[f"{key}_1"] = f"{value:%Y-%m-%d}", f"{value:%H:%M:%S}"
    return data


def test_unticking_active_in_the_admin_records_who_deactivated_and_reactivated(users, jobs):
    staff, bob = users["staff"], users["other"]
    staff.is_superuser = True
    staff.save()
    page = _page(staff)
    data = _change_data(page, bob)
    assert data.get("is_active") == "on"
    data.pop("is_active")
    r = page.post(f"/admin/auth/user/{bob.pk}/change/", data)
    assert r.status_code == 302, r.content.decode()[:3000]
    bob.refresh_from_db()
    assert bob.is_active is False
    event = Event.objects.get(kind="user_deactivated")
    assert event.actor_id == staff.pk and event.data == {"user": "bob"} and "bob deactivated" in event.message
    # a save that leaves "Active" as it is records nothing more
    r = page.post(f"/admin/auth/user/{bob.pk}/change/", {**_change_data(page, bob), "first_name": "Bob"})
    assert r.status_code == 302 and Event.objects.filter(kind="user_deactivated").count() == 1
    bob.refresh_from_db()
    assert bob.first_name == "Bob" and bob.is_active is False
    r = page.post(f"/admin/auth/user/{bob.pk}/change/", {**_change_data(page, bob), "is_active": "on"})
    assert r.status_code == 302
    bob.refresh_from_db()
    assert bob.is_active is True
    assert Event.objects.get(kind="user_reactivated").actor_id == staff.pk
    # the audit API lists them
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {services.issue_api_token(staff)[0]}")
    r = api.get("/api/v1/events/", {"kind": "user_deactivated"})
    assert r.status_code == 200 and [e["kind"] for e in r.json()["results"]] == ["user_deactivated"], r.content


def test_the_last_active_platform_admin_is_not_deactivated(users):
    staff = users["staff"]  # the only staff account of the world
    root = get_user_model().objects.create_superuser("root", password="pw")
    page = _page(root)
    # another admin is active: staff may be deactivated
    data = _change_data(page, staff)
    data.pop("is_active")
    assert page.post(f"/admin/auth/user/{staff.pk}/change/", data).status_code == 302
    staff.refresh_from_db()
    assert staff.is_active is False
    # root is now the last active one: refused on the form, in delete_user's words, nothing stored
    data = _change_data(page, root)
    data.pop("is_active")
    r = page.post(f"/admin/auth/user/{root.pk}/change/", data)
    assert r.status_code == 200
    text = r.content.decode()
    assert f"root {LAST_ADMIN}" in text, text[:5000]
    root.refresh_from_db()
    assert root.is_active is True and not Event.objects.filter(kind="user_deactivated", data__user="root").exists()
    with pytest.raises(services.ValidationError) as exc:
        services.delete_user(root, actor=staff)  # the same words as delete_user's
    assert f"root {LAST_ADMIN}" in str(exc.value)


def test_the_service_refuses_under_its_lock_and_the_admin_page_says_so(users, monkeypatch):
    """The form's check passed (a race: the other admin deactivated meanwhile); set_user_active refuses under its
    locks: a message on the change page, nothing saved."""
    staff = users["staff"]
    root = get_user_model().objects.create_superuser("root", password="pw")
    with pytest.raises(services.ValidationError) as exc:
        set_user_active(staff, False, actor=root) and set_user_active(root, False, actor=root)
    assert f"root {LAST_ADMIN}" in str(exc.value)
    root.refresh_from_db()
    assert root.is_active is True and Event.objects.filter(kind="user_deactivated").count() == 1
    assert set_user_active(staff, True, actor=root) is True
    assert set_user_active(staff, True, actor=root) is False  # already active: nothing written
    assert Event.objects.filter(kind="user_reactivated").count() == 1
    # the page: the form's check passes (patched away), the service refuses
    import gpuplatform.admin as platform_admin

    page = _page(root)
    data = _change_data(page, root)
    data.pop("is_active")
    assert set_user_active(staff, False, actor=root) is True
    monkeypatch.setattr(platform_admin, "deactivation_refusal", lambda user: "")
    r = page.post(f"/admin/auth/user/{root.pk}/change/", data, follow=True)
    assert r.status_code == 200 and r.redirect_chain == [(f"/admin/auth/user/{root.pk}/change/", 302)]
    assert [str(m) for m in r.context["messages"]] == [f"not saved: user: root {LAST_ADMIN}"]
    root.refresh_from_db()
    assert root.is_active is True


def test_a_plain_user_is_deactivated_by_the_service(users):
    vera = users["viewer"]
    assert set_user_active(vera, False, actor=users["staff"]) is True
    vera.refresh_from_db()
    assert vera.is_active is False
    assert Event.objects.get(kind="user_deactivated").data == {"user": "vera"}
