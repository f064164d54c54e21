"""New-user trial 26, finding 1: a token holding a byte that is not UTF-8 (`Authorization: Token t\\xf6k`, what
`gpuctl --token 'tökén'` sends from a latin-1 terminal) made knox's TokenAuthentication raise UnicodeDecodeError: a
500 "internal error" on every API endpoint. It is a 401 "Invalid token." with knox's WWW-Authenticate, as any other
wrong token is.

WSGI hands a header to Django as latin-1 text, so the test client's HTTP_AUTHORIZATION str holding '\\xf6' is the
raw byte 0xf6 on the wire; DRF's get_authorization_header encodes it back to b'\\xf6' before knox decodes it."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

RAW_BYTE = "Token t\xf6k"  # the byte 0xf6 alone: not UTF-8
UTF8_ON_THE_WIRE = "Token t\xc3\xb6k\xc3\xa9n"  # 'tökén' sent as UTF-8 bytes (was already a 401)


def sent(header: str) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


def assert_invalid_token(response) -> None:
    assert response.status_code == 401, (response.status_code, response.content)
    assert response.json() == {"detail": "Invalid token."}
    assert response["WWW-Authenticate"] == "Token"  # what knox answers for any other wrong token


@pytest.mark.parametrize("header", [RAW_BYTE, UTF8_ON_THE_WIRE, "Token \xff\xfe", "token \xe9"])
def test_a_token_that_is_not_utf8_is_a_401_on_every_kind_of_endpoint(users, header):
    assert_invalid_token(sent(header).get("/api/v1/jobs/"))
    assert_invalid_token(sent(header).get("/api/v1/me/"))
    assert_invalid_token(sent(header).post("/api/v1/auth-token/revoke/", {}, format="json"))
    assert_invalid_token(sent(header).post("/api/v1/jobs/", {"queue": "alpha"}, format="json"))
    # a node agent's endpoint (the agent sends its token the same way)
    assert_invalid_token(sent(header).post("/api/v1/nodes/n0/heartbeat/", {}, format="json"))
    assert_invalid_token(sent(header).get("/api/v1/federation/clusters/"))


def test_the_same_answer_as_a_wrong_ascii_token_and_a_good_token_still_works(users, client_for):
    wrong = sent("Token tok").get("/api/v1/me/")
    assert_invalid_token(wrong)
    bad = sent(RAW_BYTE).get("/api/v1/me/")
    assert_invalid_token(bad)
    assert (bad.status_code, bad.json(), bad["WWW-Authenticate"]) == (
        wrong.status_code, wrong.json(), wrong["WWW-Authenticate"])
    assert client_for("member").get("/api/v1/me/").status_code == 200
