"""Property-based fuzzing of the whole REST API against its own OpenAPI schema (schemathesis).

Every operation of /api/schema/ is called through the WSGI app (no server) as a platform admin, on the
small cluster, with a bounded number of generated examples per operation (FUZZ_EXAMPLES, default 25),
so the whole run stays within a couple of minutes. Checks: no 5xx, and every documented response
(status, content type, headers, body) conforms to the schema. Refusals (4xx) of schema-valid but
rule-breaking input are expected: the domain rules (quota tree, gang shape...) are not all expressible
in JSON Schema, so `positive_data_acceptance` is not among the checks.
"""
from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gpuplatform.wsgi import application

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
]

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


@pytest.fixture
def wsgi_keeps_connection():
    """Calls go straight into the WSGI app, whose request signals would close the database connection
    in the middle of the test's transaction (PostgreSQL); Django's own test client detaches them too."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(wsgi_keeps_connection, cluster, jobs, users):
    from gpuplatform.services import issue_api_token

    from gpuplatform.scheduling import store

    store.run_cycle_once()  # samples, a cycle, running jobs: the read endpoints have something to show
    return issue_api_token(users["staff"])[0]


@pytest.mark.slow
@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, admin_token):
    case.call_and_validate(headers={"Authorization": f"Token {admin_token}"}, checks=CHECKS)
