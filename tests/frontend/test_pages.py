"""Pages: login required, the job list (state, placement, visibility, filters), job detail, cluster page."""
from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

PAGES = ["/", "/cluster/", "/jobs/"]


@pytest.mark.parametrize("url", PAGES)
def test_pages_require_login(client, world, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_page_json_requires_login_with_a_json_401(client, world):
    response = client.get("/cluster/metrics.json")  # as the REST API answers (new-user trial 8, F15)
    assert response.status_code == 401 and response.json()["detail"]


def test_job_detail_requires_login(client, world):
    job = world["jobs"]["red-running"]
    assert client.get(f"/jobs/{job.pk}/").status_code == 302


def test_login_page_renders_and_logs_in(client, world):
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post(reverse("login"), {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 302
    assert client.get("/jobs/").status_code == 200


def test_logout_is_a_post(client, world):
    client.force_login(world["alice"])
    assert client.post(reverse("logout")).status_code in (200, 302)
    assert client.get("/jobs/").status_code == 302


def test_healthz_needs_no_login(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"


def test_job_list_shows_state_and_placement(client, world):
    client.force_login(world["admin"])
    html = client.get("/jobs/").content.decode()
    for name in ("red-running", "red-pending", "blue-done", "blue-pending"):
        assert name in html
    assert 'class="badge badge-running"' in html and 'class="badge badge-pending"' in html
    assert "nvl-0" in html and "tier 1" in html  # placement domain and tier
    assert "node-a" in html                      # node names
    assert "2 x 2" in html                       # tasks x GPUs per task
    assert "largest free block is 4" in html     # pending reason


def test_member_sees_only_their_teams_jobs(client, world):
    client.force_login(world["alice"])
    html = client.get("/jobs/").content.decode()
    assert "red-running" in html and "red-pending" in html
    assert "blue-done" not in html and "blue-pending" not in html
    blue_job = world["jobs"]["blue-done"]
    assert client.get(f"/jobs/{blue_job.pk}/").status_code == 404


def test_staff_see_all_jobs(client, world):
    client.force_login(world["admin"])
    html = client.get("/jobs/").content.decode()
    assert "blue-done" in html and "red-running" in html


@pytest.mark.parametrize("query, present, absent", [
    ("state=pending", ["red-pending", "blue-pending"], ["red-running", "blue-done"]),
    ("state=finished", ["blue-done"], ["red-pending", "red-running"]),
    ("state=live", ["red-running"], ["blue-done", "red-pending"]),
    ("team=blue", ["blue-done", "blue-pending"], ["red-running"]),
    ("queue=red&state=running", ["red-running"], ["red-pending", "blue-done"]),
])
def test_job_list_filters(client, world, query, present, absent):
    client.force_login(world["admin"])
    html = client.get(f"/jobs/?{query}").content.decode()
    for name in present:
        assert f">{name}<" in html
    for name in absent:
        assert f">{name}<" not in html


def test_job_list_paginates(client, world, make_job):
    """Keyset pages: the next link is a cursor; the two pages hold every job once."""
    import re

    from gpuplatform.models import Job

    for i in range(60):
        make_job(world["red"], world["queues"]["red"], f"bulk-{i:02d}", Job.State.PENDING)
    client.force_login(world["admin"])
    first = client.get("/jobs/").content.decode()
    nxt = re.search(r'href="([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    assert "cursor=" in nxt and "page=" not in nxt
    second = client.get("/jobs/" + nxt).content.decode()
    rows = re.findall(r'<tr data-job="(\d+)"', first) + re.findall(r'<tr data-job="(\d+)"', second)
    assert len(rows) == len(set(rows)) == Job.objects.count() == 64
    assert 'rel="next"' not in second and 'rel="prev"' in second


def test_job_list_query_count_is_bounded(client, world, make_job, django_assert_max_num_queries):
    from gpuplatform.models import Job

    for i in range(30):
        make_job(world["red"], world["queues"]["red"], f"bulk-{i:02d}", Job.State.RUNNING,
                 node=world["node"], tasks=2)
    client.force_login(world["admin"])
    with django_assert_max_num_queries(15):
        assert client.get("/jobs/").status_code == 200


def test_job_detail_shows_roles_tasks_allocations(client, world):
    client.force_login(world["alice"])
    job = world["jobs"]["red-running"]
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Roles" in html and "worker-0" in html and "worker-1" in html
    assert "node-a" in html
    assert "(4 live)" in html


def test_cluster_page_shows_sample_numbers(client, world):
    client.force_login(world["alice"])
    html = client.get("/cluster/").content.decode()
    assert '<span data-metric="allocation_rate">50.0</span>%' in html
    assert '<span data-metric="fragmentation_rate">50.0</span>%' in html   # the latest sample
    assert "tier 2" in html                                                    # largest runnable per tier
    assert "vendor/plotly-strict.min.js" in html
    assert 'id="initial-figures"' in html
    # per-team counts and per-queue usage vs quota
    assert ">red<" in html and ">blue<" in html
    assert "100%" in html  # red uses 4 of a quota of 4
    # the header shows the cluster clock of the latest cycle
    assert "2017-10-09 08:20 UTC" in html


def test_metrics_json(client, world):
    client.force_login(world["alice"])
    data = client.get("/cluster/metrics.json").json()
    assert data["clock"].startswith("2017-10-09T08:20")
    assert data["numbers"]["allocation_rate"] == 50.0
    assert data["numbers"]["free_gpus"] == 4
    assert data["numbers"]["jobs_pending"] == 2 and data["numbers"]["jobs_running"] == 1
    assert data["numbers"]["jobs_finished"] == 1
    assert data["largest_runnable"] == {"1": 4, "2": 4, "3": 4}
    rates = data["figures"]["rates"]["data"]
    assert [len(t["y"]) for t in rates] == [3, 3]
    assert rates[1]["y"] == [0.0, 25.0, 50.0]
    queues = {t["name"]: t["y"] for t in data["figures"]["queues"]["data"]}
    assert queues == {"blue": [0, 1, 0], "red": [4, 4, 4]}
    assert "<table" in data["html"]["queues"] and "<table" in data["html"]["teams"]


def test_plotly_js_is_served_from_own_static_files(client, db):
    from django.contrib.staticfiles import finders

    path = finders.find("vendor/plotly-strict.min.js")
    assert path and path.endswith("plotly-strict.min.js")
    response = client.get("/static/vendor/plotly-strict.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"plotly.js (strict - minified)" in body[:2000] and len(body) > 1_000_000


def test_the_strict_plotly_bundle_is_the_plotly_js_the_python_package_builds_figures_for():
    """The pages load plotly.js's strict bundle (no eval: the CSP has no 'unsafe-eval'); its version must be
    the one the installed plotly package ships, so the figures built in Python match. After upgrading
    plotly: `make vendor-plotly`."""
    import re
    from pathlib import Path

    import plotly

    def version(path: Path) -> str:
        return re.search(r"plotly\.js.*? v(\d+\.\d+\.\d+)", path.read_text(errors="replace")[:400]).group(1)

    strict = Path(__file__).resolve().parents[2] / "frontend" / "static" / "vendor" / "plotly-strict.min.js"
    assert version(strict) == version(Path(plotly.__file__).parent / "package_data" / "plotly.min.js")


def test_state_colors_defined_once_and_used_by_badges(client, world):
    from frontend.states import STATE_COLORS

    client.force_login(world["alice"])
    html = client.get("/jobs/").content.decode()
    assert f".badge-running {{ background: {STATE_COLORS['running']}; }}" in html


def test_queue_usage_rolls_subtrees_up_and_series_skip_inner_queues(world):
    from gpuplatform import queries

    usage = {u.queue: u for u in queries.queue_usage()}
    assert usage["red"].used == 4 and usage["blue"].used == 0
    assert usage["red"].pending_demand == 32 and usage["red"].running_jobs == 1
    assert usage["root"].used == 4 and usage["root"].pending_demand == 34 and usage["root"].pending_jobs == 2
    assert list(usage)[-1] == "root"  # team queues first
    names = {r["queue__name"] for r in queries.queue_series()}
    assert names == {"red", "blue"}


def test_cluster_page_marks_the_members_own_team(client, world):
    client.force_login(world["alice"])
    html = client.get("/cluster/").content.decode()
    assert html.count("your team") == 1  # red only
    client.force_login(world["admin"])
    assert "your team" not in client.get("/cluster/").content.decode()


def test_cluster_page_says_which_moment_the_cards_and_the_queue_table_show(client, world):
    """New-user trial 8, F3: the allocation card (the latest cycle's sample) said "now" while the queue table
    beside it is live; the card names its cycle (updated by metrics.json) and the table says it is live."""
    client.force_login(world["alice"])
    html = client.get("/cluster/").content.decode()
    assert 'allocated / schedulable as cycle <span data-metric="sample_cycle">3</span> left them' in html
    assert "schedulable, now" not in html
    assert "live: jobs started or ended since the last cycle count here" in html
    assert client.get("/cluster/metrics.json").json()["numbers"]["sample_cycle"] == 3


def test_cluster_page_labels_the_cycles_counts_apart_from_the_live_job_counts(client, world):
    """New-user trial 9, F4: the header's "cycle 406 ... 97 pending" (that cycle's snapshot) and the Jobs card's
    "267 pending" (live rows) stood side by side under one cycle label. Each now says where it comes from, on
    the page and in what metrics.json gives the page's poll."""
    client.force_login(world["alice"])
    html = client.get("/cluster/").content.decode()
    assert "cycle 3 · 13 ms · in that cycle: 1 started, 2 left pending" in html
    assert '<span class="label">jobs now</span>' in html and "live counts, not as the cycle left them" in html
    data = client.get("/cluster/metrics.json").json()
    assert (data["cycle"], data["cycle_started"], data["cycle_pending"]) == (3, 1, 2)
