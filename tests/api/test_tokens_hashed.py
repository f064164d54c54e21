"""Issue #12, trust: API tokens are stored only as a hash (django-rest-knox), expire, and can be revoked;
tokens issued before (DRF's plaintext table) keep working after the migration hashes them."""
from __future__ import annotations

import hashlib
import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from gpuplatform import services
from gpuplatform.models import Event

pytestmark = pytest.mark.django_db


def with_token(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def stored_values() -> set[str]:
    """Every string the token table holds."""
    return {str(v) for row in AuthToken.objects.values_list() for v in row}


def test_the_token_endpoint_returns_a_token_once_and_stores_only_its_hash(users):
    before = timezone.now()
    r = APIClient().post("/api/v1/auth-token/", {"username": "mike", "password": "pw"}, format="json")
    assert r.status_code == 200
    token = r.json()["token"]
    assert len(token) == 64 and token not in stored_values()
    row = AuthToken.objects.get(user__username="mike")
    assert row.digest == hashlib.sha512(token.encode()).hexdigest() and row.token_key == token[:15]
    # expiry: API_TOKEN_TTL_DAYS (30) from now, in the response and in the row
    assert timedelta(days=30) - timedelta(minutes=1) < row.expiry - before < timedelta(days=30, minutes=1)
    assert r.json()["expiry"].startswith(row.expiry.strftime("%Y-%m-%dT%H:%M"))
    assert with_token(token).get("/api/v1/me/").status_code == 200
    # asking again gives a new token (the first cannot be shown again); both work
    second = APIClient().post("/api/v1/auth-token/", {"username": "mike", "password": "pw"}, format="json").json()["token"]
    assert second != token and with_token(token).get("/api/v1/me/").status_code == 200
    assert with_token(second).get("/api/v1/me/").status_code == 200
    issued = Event.objects.filter(kind="api_token_issued", data__user="mike")
    assert issued.count() == 2 and not any(token in e.message or token in str(e.data) for e in issued)


def test_a_wrong_or_expired_token_is_refused(users):
    token, _ = services.issue_api_token(users["member"])
    assert with_token(token[:-1] + ("0" if token[-1] != "0" else "1")).get("/api/v1/me/").status_code == 401
    AuthToken.objects.filter(user=users["member"]).update(expiry=timezone.now() - timedelta(seconds=1))
    r = with_token(token).get("/api/v1/me/")
    assert r.status_code == 401
    assert not AuthToken.objects.filter(user=users["member"]).exists()  # deleted on its use


def test_issue_refuses_a_non_positive_lifetime_and_an_inactive_user(users):
    with pytest.raises(services.ValidationError) as err:
        services.issue_api_token(users["member"], ttl=timedelta(0))
    assert "ttl" in err.value.errors
    users["member"].is_active = False
    users["member"].save()
    with pytest.raises(services.ValidationError) as err:
        services.issue_api_token(users["member"])
    assert "user" in err.value.errors


def test_revoking_this_token_or_all_of_them(users):
    first, _ = services.issue_api_token(users["member"])
    second, _ = services.issue_api_token(users["member"])
    r = with_token(first).post("/api/v1/auth-token/revoke/", {}, format="json")
    assert r.status_code == 204
    assert with_token(first).get("/api/v1/me/").status_code == 401
    assert with_token(second).get("/api/v1/me/").status_code == 200  # only the one used was revoked
    third, _ = services.issue_api_token(users["member"])
    r = with_token(second).post("/api/v1/auth-token/revoke/", {"all": True}, format="json")
    assert r.status_code == 204
    assert with_token(third).get("/api/v1/me/").status_code == 401
    assert Event.objects.filter(kind="api_token_revoked").count() == 2


def test_revoke_refuses_bad_input_naming_the_field(users):
    token, _ = services.issue_api_token(users["member"])
    r = with_token(token).post("/api/v1/auth-token/revoke/", {"everything": True}, format="json")
    assert r.status_code == 400 and "everything" in r.json()
    r = with_token(token).post("/api/v1/auth-token/revoke/", {"all": "yes"}, format="json")
    assert r.status_code == 400 and "all" in r.json()
    session = APIClient()
    assert session.login(username="mike", password="pw")
    r = session.post("/api/v1/auth-token/revoke/", {}, format="json")
    assert r.status_code == 400 and "all" in r.json()
    assert with_token(token).get("/api/v1/me/").status_code == 200  # nothing was revoked


def test_a_node_agent_token_is_hashed_long_lived_and_replaced_on_reissue(cluster):
    old = services.issue_node_agent_token(["n0"])
    new = services.issue_node_agent_token(["n0"])
    assert old != new and old not in stored_values() and new not in stored_values()
    assert with_token(old).get("/api/v1/nodes/n0/assignments/").status_code == 401
    assert with_token(new).get("/api/v1/nodes/n0/assignments/").status_code == 200
    row = AuthToken.objects.get(user__username="agent-n0")
    assert row.expiry - timezone.now() > timedelta(days=364)  # AGENT_TOKEN_TTL_DAYS


@pytest.mark.django_db(transaction=True)  # SQLite's schema editor refuses to open inside the test's transaction
def test_the_migration_hashes_plaintext_tokens_and_they_keep_working(users):
    """A database from before this change holds DRF's authtoken_token rows in plaintext: the data
    migration turns each into a hashed knox token (agents get the agent lifetime) and empties the table.
    It runs in a schema editor, as `migrate` runs it, on PostgreSQL and on SQLite alike."""
    agent = get_user_model().objects.create_user("agent-x")
    agent.groups.add(Group.objects.get_or_create(name="node-agents")[0])
    old_member, old_agent = "a" * 40, "b1" * 20
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp, user_id integer)")
    try:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s), (%s, %s, %s)",
                           [old_member, timezone.now(), users["member"].pk, old_agent, timezone.now(), agent.pk])
        migration = importlib.import_module("gpuplatform.migrations.0014_trust")
        with connection.schema_editor() as editor:
            migration.hash_plaintext_tokens(apps, editor)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM authtoken_token")
            assert cursor.fetchone()[0] == 0
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE authtoken_token")
    assert old_member not in stored_values() and old_agent not in stored_values()
    assert with_token(old_member).get("/api/v1/me/").json()["username"] == "mike"
    ttl = {t.user.username: t.expiry - timezone.now() for t in AuthToken.objects.select_related("user")}
    assert timedelta(days=29) < ttl["mike"] < timedelta(days=31) and ttl["agent-x"] > timedelta(days=364)


def test_a_user_holds_at_most_api_tokens_per_user(users, settings):
    settings.API_TOKENS_PER_USER = 3
    login = {"username": "mike", "password": "pw"}
    tokens = [APIClient().post("/api/v1/auth-token/", login, format="json").json()["token"] for _ in range(3)]
    r = APIClient().post("/api/v1/auth-token/", login, format="json")
    assert r.status_code == 400 and "revoke one" in r.json()["user"][0]
    assert AuthToken.objects.filter(user=users["member"]).count() == 3
    # an expired token no longer counts; revoking one makes room too
    AuthToken.objects.filter(token_key=tokens[0][:15]).update(expiry=timezone.now() - timedelta(seconds=1))
    assert APIClient().post("/api/v1/auth-token/", login, format="json").status_code == 200
    assert with_token(tokens[1]).post("/api/v1/auth-token/revoke/", {}, format="json").status_code == 204
    assert APIClient().post("/api/v1/auth-token/", login, format="json").status_code == 200
    assert AuthToken.objects.filter(user=users["member"]).count() == 3


def test_a_user_at_the_cap_without_a_token_revokes_them_with_the_password(users, settings):
    """New-user trial 23: at API_TOKENS_PER_USER the refusal said to revoke one, but revoking needed a token (the
    username and password answered 401): a user who kept none was locked out of the API. The revoke endpoint
    takes the username, password and all=true (the refusal shows how); the cap stays."""
    settings.API_TOKENS_PER_USER = 3
    login = {"username": "mike", "password": "pw"}
    tokens = [APIClient().post("/api/v1/auth-token/", login).json()["token"] for _ in range(3)]
    r = APIClient().post("/api/v1/auth-token/", login)
    message = r.json()["user"][0]
    assert r.status_code == 400 and "-d username=mike -d password=... -d all=true" in message, message
    assert "/api/v1/auth-token/revoke/" in message
    # all=true left out: a 400 saying to send it, nothing revoked
    r = APIClient().post("/api/v1/auth-token/revoke/", login)
    assert r.status_code == 400 and "all=true" in r.json()["all"][0], r.content
    r = APIClient().post("/api/v1/auth-token/revoke/", {**login, "password": "wrong", "all": "true"})
    assert r.status_code == 400 and "non_field_errors" in r.json(), r.content
    assert AuthToken.objects.filter(user=users["member"]).count() == 3
    r = APIClient().post("/api/v1/auth-token/revoke/", {**login, "all": "true"})  # form-encoded, as curl -d sends
    assert r.status_code == 204, r.content
    assert all(with_token(t).get("/api/v1/me/").status_code == 401 for t in tokens)
    assert not AuthToken.objects.filter(user=users["member"]).exists()
    assert Event.objects.filter(kind="api_token_revoked", actor=users["member"]).count() == 1
    assert APIClient().post("/api/v1/auth-token/", login).status_code == 200
    # JSON too; another user's tokens are untouched
    other, _ = services.issue_api_token(users["viewer"])
    r = APIClient().post("/api/v1/auth-token/revoke/", {**login, "all": True}, format="json")
    assert r.status_code == 204 and with_token(other).get("/api/v1/me/").status_code == 200
    # neither a token nor a password: 401 saying what is needed
    r = APIClient().post("/api/v1/auth-token/revoke/", {"all": True}, format="json")
    assert r.status_code == 401 and "username and password" in r.json()["detail"], r.content
