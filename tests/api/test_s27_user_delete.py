"""Session 27, an admin's trial: deleting user bob (his job running) succeeded, the admin's confirmation page listing
only his token and membership; the job's submitter and its "submitted" Event's actor were emptied and ?submitter=bob
answered "unknown user": the audit trail lost who did what. A user who submitted a job or whom an Event names as its
actor is now refused deletion (PROTECT, migration 0034_user_history_protect), the admin's delete page saying why and
to deactivate the account instead (is_active=False: sign-in and the account's API tokens refused). A user with no
history is still deleted, memberships and tokens with it."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError
from django.test import Client
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.audit import record_event
from gpuplatform.models import Event, Job, Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def root_page(users):
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def _token(user) -> str:
    return services.issue_api_token(user)[0]


def test_a_user_who_submitted_a_job_is_not_deleted_and_the_job_keeps_its_submitter(users, jobs, admin):
    bob, job = users["other"], jobs["other"]
    assert Event.objects.filter(job=job, kind="submitted").exists()
    with pytest.raises(ProtectedError):
        bob.delete()
    with pytest.raises(services.ValidationError) as exc:  # the service's own rule, before PROTECT would refuse it
        services.delete_user(bob, actor=users["staff"])
    assert "bob cannot be deleted" in str(exc.value) and "1 job(s) submitted" in str(exc.value), exc.value
    assert not Event.objects.filter(kind="user_deleted").exists()  # delete_user's transaction rolled back
    assert get_user_model().objects.filter(pk=bob.pk).exists() and Membership.objects.filter(user=bob).exists()
    job.refresh_from_db()
    assert job.submitter_id == bob.pk
    r = admin.get(f"/api/v1/jobs/{job.pk}/")
    assert r.status_code == 200 and r.json()["submitter"] == "bob", r.content
    r = admin.get("/api/v1/jobs/", {"submitter": "bob"})
    assert r.status_code == 200 and [j["id"] for j in r.json()["results"]] == [job.pk], r.content


def test_an_events_actor_is_not_deleted(users):
    vera = users["viewer"]
    record_event("note", "vera did something", actor=vera)
    with pytest.raises(ProtectedError):
        vera.delete()
    assert Event.objects.get(kind="note").actor_id == vera.pk


def test_the_admins_delete_page_says_why_and_to_deactivate(users, jobs, root_page):
    bob, job = users["other"], jobs["other"]
    url = f"/admin/auth/user/{bob.pk}/delete/"
    page = root_page.get(url)
    text = page.content.decode()
    assert page.status_code == 200
    assert "protected related objects" in text and "bob cannot be deleted" in text, text
    assert "1 job(s) submitted" in text and "Deactivate the account instead" in text and "Active" in text
    assert f"/admin/auth/user/{bob.pk}/change/" in text
    assert 'name="post"' not in text  # no "Yes, I'm sure" form: the page deletes nothing
    r = root_page.post(url, {"post": "yes"}, follow=True)
    assert r.status_code == 200 and "bob cannot be deleted" in r.content.decode()
    assert get_user_model().objects.filter(pk=bob.pk).exists()
    job.refresh_from_db()
    assert job.submitter_id == bob.pk


def test_delete_selected_with_one_user_with_history_deletes_none(users, jobs, root_page):
    bob, vera = users["other"], users["viewer"]
    r = root_page.post("/admin/auth/user/", {"action": "delete_selected", "_selected_action": [bob.pk, vera.pk],
                                              "post": "yes"}, follow=True)
    text = r.content.decode()
    assert r.status_code == 200 and "bob cannot be deleted" in text and "vera" not in text.split("cannot be deleted")[0][-40:]
    assert get_user_model().objects.filter(pk__in=[bob.pk, vera.pk]).count() == 2


def test_a_user_without_history_is_still_deleted_with_memberships_and_tokens(users, root_page):
    from knox.models import AuthToken

    vera = users["viewer"]
    _token(vera)
    page = root_page.get(f"/admin/auth/user/{vera.pk}/delete/")
    assert page.status_code == 200 and "protected" not in page.content.decode()
    r = root_page.post(f"/admin/auth/user/{vera.pk}/delete/", {"post": "yes"}, follow=True)
    assert r.status_code == 200
    assert not get_user_model().objects.filter(pk=vera.pk).exists()
    assert not Membership.objects.filter(user_id=vera.pk).exists()
    assert not AuthToken.objects.filter(user_id=vera.pk).exists()
    assert Event.objects.filter(kind="user_deleted", data__user="vera").exists()


def test_history_added_after_the_page_check_is_a_refusal_message_not_a_500(users, jobs, monkeypatch):
    from gpuplatform.admin import UserAdmin
    from gpuplatform.services import tenancy

    # the history written between the service's check and the delete (a submit at the same moment): PROTECT refuses
    # the delete, and the service answers with the same refusal, nothing deleted
    real, calls = tenancy.user_history, []

    def history_unseen_at_first(user):
        calls.append(user.pk)
        return "" if len(calls) == 1 else real(user)

    monkeypatch.setattr(tenancy, "user_history", history_unseen_at_first)
    with pytest.raises(services.ValidationError) as exc:
        UserAdmin.delete_service(users["other"], actor=users["staff"])
    assert "bob cannot be deleted" in str(exc.value) and "Deactivate" in str(exc.value)
    assert get_user_model().objects.filter(pk=users["other"].pk).exists()


def test_a_deactivated_users_token_is_refused_and_sign_in_too(users, jobs):
    bob = users["other"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {_token(bob)}")
    assert client.get("/api/v1/jobs/").status_code == 200
    bob.is_active = False
    bob.save(update_fields=["is_active"])
    r = client.get("/api/v1/jobs/")
    assert r.status_code == 401 and r.json() == {"detail": "User inactive or deleted."}, (r.status_code, r.content)
    r = APIClient().post("/api/v1/auth-token/", {"username": "bob", "password": "pw"}, format="json")
    print("sign-in of a deactivated user:", r.status_code, r.content)
    assert r.status_code in (400, 401) and "token" not in r.json(), (r.status_code, r.content)
    jobs["other"].refresh_from_db()
    assert jobs["other"].submitter_id == bob.pk


def test_a_deactivated_users_session_and_page_sign_in_are_refused(users):
    from django.contrib.auth import authenticate
    from django.urls import reverse

    bob = users["other"]
    page = Client()
    page.force_login(bob)
    assert page.get("/api/v1/jobs/").status_code == 200
    bob.is_active = False
    bob.save(update_fields=["is_active"])
    assert page.get("/api/v1/jobs/").status_code in (401, 403)  # the session's user is no longer loaded
    assert authenticate(username="bob", password="pw") is None
    r = Client().post(reverse("login"), {"username": "bob", "password": "pw"})
    assert r.status_code == 200 and "_auth_user_id" not in r.wsgi_request.session  # the form again, not signed in
