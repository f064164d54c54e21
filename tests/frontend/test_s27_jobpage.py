"""New-user trial 27 (job page and dashboard 400s), the server side: a dashboard page's 400 is, to a browser, a page
in the site's layout (its navigation, its icon: no /favicon.ico 404) with the same words as the text 400 that curl
and scripts still get; the job page's map is marked for live.js to remove once the job ended (as a reload shows)."""
from __future__ import annotations

import pytest

from gpuplatform.models import Job

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what Chromium sends for a page


def _both(client, url):
    text = client.get(url)
    page = client.get(url, HTTP_ACCEPT=BROWSER)
    return text, page


@pytest.mark.parametrize("url", ["/topology/?domain=local-0", "/topology/?zoom=no-such-domain", "/?foo=1",
                                 "/queues/?foo=1", "job"])
def test_a_dashboard_pages_400_is_a_page_in_the_layout_with_the_same_words(client, world, url):
    client.force_login(world["admin"])
    if url == "job":
        url = f"/jobs/{world['jobs']['red-running'].pk}/?foo=1"
    text, page = _both(client, url)
    assert text.status_code == 400 and text["Content-Type"].startswith("text/plain")  # curl, scripts: as before
    words = text.content.decode()
    assert words and "\n" not in words
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "Accept" in page["Vary"] and "Accept" in text["Vary"]
    html = page.content.decode()
    from django.utils.html import escape
    assert f'<p class="error-box" role="alert" id="bad-request">{escape(words)}</p>' in html
    assert '<nav aria-label="Main">' in html  # the site's navigation, a way back
    assert '<link rel="icon" type="image/svg+xml" href="/static/frontend/favicon.svg">' in html  # no /favicon.ico


def test_the_topology_domain_400_keeps_its_message(client, world):
    client.force_login(world["admin"])
    text, page = _both(client, "/topology/?domain=local-0")
    assert text.content.decode().startswith("domain: unknown query parameter; this page takes: ")
    assert "Bad request" in page.content.decode()


def test_the_json_twins_400s_stay_json(client, world):
    client.force_login(world["admin"])
    r = client.get("/topology.json?domain=local-0", HTTP_ACCEPT=BROWSER)
    assert r.status_code == 400 and r["Content-Type"].startswith("application/json") and "domain" in r.json()


def test_the_map_of_a_live_job_is_marked_for_removal_and_an_ended_job_has_none(client, world):
    client.force_login(world["admin"])
    running = client.get(f"/jobs/{world['jobs']['red-running'].pk}/").content.decode()
    assert '<section class="card" id="job-map" data-live-remove>' in running
    done = client.get(f"/jobs/{world['jobs']['blue-done'].pk}/").content.decode()
    assert world["jobs"]["blue-done"].state == Job.State.SUCCEEDED
    assert 'id="job-map"' not in done and "Placement on the map" not in done
