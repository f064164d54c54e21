"""Session 27 (found in a real browser): /api/docs/ was a blank page. drf-spectacular's Swagger UI page loads its
start-up script as `/api/docs/?script=` (the empty parameter is the view's own protocol), and the input guard's
empty-parameter rule answered it with a 400 JSON, which Chromium refused to run. The rule now covers the REST API's
own endpoints (`/api/v1/...`) and the pages' JSON endpoints, not the library views beside them (inputs.py,
takes_no_blank_params). The browser test is tests/frontend/test_s27_api_docs_browser.py."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from gpuplatform.inputs import EMPTY_MESSAGE, NUL_MESSAGE, takes_no_blank_params

pytestmark = pytest.mark.django_db


def test_the_swagger_ui_start_up_script_is_served_as_javascript():
    page = APIClient().get("/api/docs/")
    assert page.status_code == 200
    assert b'src="/api/docs/?script="' in page.content, page.content[:2000]  # what the page asks for, as it is
    script = APIClient().get("/api/docs/?script=")
    assert script.status_code == 200, (script.status_code, script.content[:300])
    assert script["Content-Type"].split(";")[0] == "application/javascript", script["Content-Type"]
    assert b"SwaggerUIBundle" in script.content and b"/api/schema/" in script.content


@pytest.mark.parametrize("url", ["/api/docs/?script=&lang=", "/api/redoc/?lang=", "/api/schema/?lang=",
                                 "/api/schema/?version="])
def test_the_library_views_beside_the_api_answer_their_own_empty_parameters(url):
    r = APIClient().get(url)
    assert r.status_code == 200, (url, r.status_code, r.content[:300])


def test_a_nul_is_still_refused_on_the_docs_views():
    r = APIClient().get("/api/docs/?script=%00")
    assert r.status_code == 400 and r.json() == {"script": [NUL_MESSAGE]}, r.content


@pytest.mark.parametrize("url", ["/api/v1/teams/?format=", "/api/v1/jobs/?state=%20", "/api/v1/federation/jobs/?x=",
                                 "/api/v1/nope/?limit="])
def test_the_api_own_endpoints_still_refuse_an_empty_parameter(url):
    r = APIClient().get(url)
    param = url.split("?")[1].split("=")[0]
    assert r.status_code == 400 and r.json() == {param: [EMPTY_MESSAGE]}, (url, r.status_code, r.content[:300])


@pytest.mark.parametrize("path,ruled", [
    ("/api/v1/", True), ("/api/v1/jobs/", True), ("/api/v1/jobs.json", True), ("/topology.json", True),
    ("/api/docs/", False), ("/api/redoc/", False), ("/api/schema/", False), ("/api/schema.json", False),
    ("/admin/x.json", False), ("/static/x.json", False), ("/jobs/", False),
])
def test_which_paths_take_no_empty_parameter(path, ruled):
    assert takes_no_blank_params(path) is ruled
