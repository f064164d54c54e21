"""Browser tests: Playwright driving Debian's Chromium (headless) against pytest-django's live server.

Skipped on a laptop without /usr/bin/chromium or without the playwright package; under CI=1 they FAIL
instead (the convention of tests/integration/conftest.py). `playwright install` is never run: the browser
is the system's. Screenshots of every dashboard go to test-artifacts/ (gitignored).
"""
from __future__ import annotations

import os
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SLEEP = ["sleep", "3600"]  # what the tasks run (simulated nodes: nothing is started)


def _problem() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser():
    problem = _problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the browser tests cannot run: {problem}")
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop in this thread; the ORM calls of the tests themselves
    # are synchronous and safe, so Django's async guard is lifted while the browser is up.
    old = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield b
            b.close()
    finally:
        if old is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = old


class Page:
    """A page plus the console errors and uncaught exceptions seen on it."""

    def __init__(self, browser, base_url: str):
        self.base = base_url
        # Tall enough for the whole submit form: a full-page shot of a page taller than the viewport
        # resizes it for the capture, and headless Chromium then dropped the next click on the submit button.
        self.context = browser.new_context(viewport={"width": 1400, "height": 1600})
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text} @ {self.page.url}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e} @ {self.page.url}"))
        self.page.on("dialog", lambda d: d.accept())

    def go(self, path: str):
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        self.assert_clean()
        return self.page

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def assert_clean(self) -> None:
        assert self.errors == [], "\n".join(self.errors)


@pytest.fixture
def cluster(settings):
    """16 nodes of 8 GPUs: 2 leaves x 4 NVLink domains x 2 nodes; teams red (alice) and blue, a running
    blue job and a few cycles of samples."""
    from gpuplatform import services
    from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec
    from gpuplatform.scheduling.store import run_cycle_once

    settings.REDIS_URL = ""  # no broker: the test runs the cycles itself
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    domains = [DomainSpec("spine", 3)] + [DomainSpec(f"leaf{l}", 2, "spine") for l in range(2)]
    domains += [DomainSpec(f"nvl{l}{d}", 1, f"leaf{l}") for l in range(2) for d in range(4)]
    nodes = [NodeSpec(f"n{l}{d}{n}", "H100", 8, domain=f"nvl{l}{d}") for l in range(2) for d in range(4) for n in range(2)]
    queues = [QueueSpec("root", quotas={"H100": (0, 128, None)}),
              QueueSpec("red", parent="root", team="red", quotas={"H100": (8, 48, 128)}),
              QueueSpec("blue", parent="root", team="blue", quotas={"H100": (0, 32, 128)})]
    services.load_cluster_spec(ClusterSpec("browser", tuple(nodes), tuple(domains), tuple(queues)))
    from gpuplatform.models import Team
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    services.add_member(Team.objects.get(name="red"), alice, "member")
    blue = Team.objects.get(name="blue")
    t0 = timezone.now() - timedelta(minutes=30)
    services.submit_job(command=SLEEP, team=blue, queue="blue", name="blue-big", submitted_at=t0,
                        roles=[{"name": "worker", "tasks": 5, "gpus_per_task": 8}])
    services.submit_job(command=SLEEP, team=blue, queue="blue", name="blue-small", submitted_at=t0,
                        roles=[{"name": "worker", "tasks": 1, "gpus_per_task": 2}])
    for minutes in (20, 10, 1):
        run_cycle_once(clock=timezone.now() - timedelta(minutes=minutes))
    return {"run_cycle": run_cycle_once}


def wait_js(page, expression: str, timeout: float = 15_000) -> None:
    """Wait until the JavaScript `expression` is truthy in `page`. Playwright's page.wait_for_function
    compiles its predicate with eval inside the page, which the Content-Security-Policy refuses (no
    'unsafe-eval', issue 12); page.evaluate runs through the DevTools protocol, which the policy allows."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} ms waiting for {expression}")
        time.sleep(0.1)


def login(p: Page, username="alice", password="pw-alice-123"):
    page = p.go("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    p.assert_clean()


def fill_role(page, i, **values):
    for field, value in values.items():
        page.fill(f"#id_roles-{i}-{field}", str(value))


def test_gang_job_from_submission_to_cancel(browser, live_server, cluster):
    from gpuplatform.models import Job

    p = Page(browser, live_server.url)
    login(p)
    p.shot("cluster")

    # A bad submission: the browser refuses min_available > tasks with a clear message ...
    page = p.go("/jobs/new/")
    page.fill("#id_name", "gang-1")
    page.fill("#id_command", "python3 train.py --epochs 3")
    fill_role(page, 0, name="worker", tasks=2, gpus_per_task=4, min_available=3)
    page.click("#submit-job")
    message = page.eval_on_selector("#id_roles-0-min_available", "el => el.validationMessage")
    assert "must not exceed tasks" in message and page.url.endswith("/jobs/new/")
    # ... and the server answers the same field error when the browser's checks are bypassed.
    with page.expect_navigation():
        page.eval_on_selector("#job-form", "f => f.submit()")  # no submit event, no browser checks
    page.wait_for_load_state("networkidle")
    error = page.locator(".has-error .field-error").first
    assert "must not exceed tasks (2)" in error.inner_text()
    assert page.locator(".has-error #id_roles-0-min_available").count() == 1
    p.shot("job-form-error")

    # The gang: 2 x 4 GPU workers + 1 x 2 GPU evaluator, all inside one NVLink domain.
    page = p.go("/jobs/new/")
    page.fill("#id_name", "gang-1")
    page.fill("#id_command", "python3 train.py --epochs 3")
    page.fill("#id_env", "NCCL_DEBUG=INFO")
    fill_role(page, 0, name="worker", tasks=2, gpus_per_task=4, min_available="")
    page.click("#add-role")
    fill_role(page, 1, name="eval", tasks=1, gpus_per_task=2)
    page.select_option("#id_topology_mode", "hard")
    page.select_option("#id_highest_tier", "1")
    page.fill("#id_time_limit_minutes", "90")
    p.shot("job-form")
    page.click("#submit-job")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    p.assert_clean()
    job = Job.objects.get(name="gang-1")
    assert page.locator("h1 .badge").inner_text() == "pending"
    assert [(r.name, r.tasks, r.gpus_per_task, r.min_available) for r in job.roles.order_by("id")] == [
        ("worker", 2, 4, 2), ("eval", 1, 2, 1)]

    cluster["run_cycle"]()
    page = p.go(f"/jobs/{job.pk}/")
    assert page.locator("h1 .badge").inner_text() == "running"
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    assert page.locator("ol.history li").count() >= 2
    job.refresh_from_db()
    # The log view: one choice per task, and it has heard from the logs API (simulated nodes: no output).
    assert page.locator("#log-task option").count() == 3
    wait_js(page, "document.getElementById('log-status').textContent.indexOf('attempt') >= 0")
    # Logs reach the page: what a node agent sends for worker-0 shows up, and more output appears live.
    from gpuplatform.execution import append_log
    from gpuplatform.models import Task

    first = Task.objects.select_related("node", "role").get(job=job, role__name="worker", index=0)
    line1, line2 = "[rank 0] epoch 1 loss 2.31\n", "[rank 0] epoch 2 loss 1.87\n"
    assert append_log(first.node, task_id=first.pk, attempt=0, offset=0, data=line1)[0]
    wait_js(page, "document.getElementById('log-output').textContent.indexOf('epoch 1 loss') >= 0")
    assert append_log(first.node, task_id=first.pk, attempt=0, offset=len(line1), data=line2)[0]
    wait_js(page, "document.getElementById('log-output').textContent.indexOf('epoch 2 loss') >= 0",
                           timeout=10000)
    assert page.locator("#log-output").inner_text().count("epoch 1 loss") == 1  # appended, not repeated
    p.shot("job-running")

    # On the topology map: the job's domain, zoomed, filtered to this job.
    page = p.go(f"/topology/?zoom={job.placement_domain}&job={job.pk}")
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    totals = page.locator("#topology-totals").inner_text()
    assert "10 of 16 GPUs match the filter" in totals and "10 running" in totals, totals
    assert "the legend counts every GPU on the map" in totals, totals  # two "running" counts, told apart
    p.shot("topology-job")

    # The whole cluster, then a click on a domain zooms in.
    page = p.go("/topology/")
    page.wait_for_selector("#topology[data-level=domains] .main-svg")
    assert page.locator("#topology .barlayer .point").count() >= 8
    p.shot("topology")
    page.locator("#topology .barlayer .point path").first.click(force=True)
    page.wait_for_selector("#topology[data-level=gpus]")
    assert "nvl" in page.locator("#topology-path").inner_text()
    p.shot("topology-zoomed")

    for path, shot in (("/queues/", "queues"), ("/fragmentation/", "fragmentation"), ("/queueing/", "queueing")):
        page = p.go(path)
        page.wait_for_selector(".fig[data-points] .main-svg")
        points = page.eval_on_selector_all(".fig[data-points]", "els => els.map(e => +e.dataset.points)")
        assert points and max(points) > 0, (path, points)
        p.shot(shot)
    assert page.locator("#pending-list").inner_text()

    page = p.go("/jobs/")
    assert "gang-1" in page.inner_text("table.jobs")
    p.shot("jobs")

    # Cancel (confirm dialog accepted): the job ends, its GPUs are released.
    page = p.go(f"/jobs/{job.pk}/")
    page.click("#cancel-job")
    page.wait_for_load_state("networkidle")
    assert page.locator("h1 .badge").inner_text() == "cancelled"
    assert "cancelled" in page.locator(".messages").inner_text()
    job.refresh_from_db()
    assert job.state == "cancelled" and not job.allocations.filter(released_at__isnull=True).exists()
    p.shot("job-cancelled")
    p.assert_clean()
    p.context.close()


def test_charts_update_live_without_a_reload(browser, live_server, cluster):
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/fragmentation/")
    page.wait_for_selector("#fig-rates[data-points] .main-svg")
    before = int(page.get_attribute("#fig-rates", "data-points"))
    page.evaluate("window.__marker = 1")
    cluster["run_cycle"]()
    wait_js(page, f"+document.getElementById('fig-rates').dataset.points > {before}", timeout=15_000)
    assert page.evaluate("window.__marker") == 1  # same document: updated in place
    p.assert_clean()
    p.context.close()


def test_forecast_on_the_submit_form_and_the_quota_what_if(browser, live_server, cluster):
    """Issue #15: the submit form shows "would start ..." before submitting; an admin tries a quota change
    on the queues page and sees every team queue's wait before and after; nothing is saved."""
    from gpuplatform.models import Event, Job, Quota

    jobs, events, quotas = Job.objects.count(), Event.objects.count(), list(Quota.objects.values_list())
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/jobs/new/")
    fill_role(page, 0, name="worker", tasks=1, gpus_per_task=8)
    page.click("#estimate-start")
    wait_js(page, "document.getElementById('start-estimate').textContent.startsWith('would start')")
    assert re.match(r"would start (at the next cycle|in about .+)", page.inner_text("#start-estimate"))
    p.shot("job-form-estimate")
    p.assert_clean()

    get_user_model().objects.create_user("boss", password="pw-boss-123", is_staff=True, is_superuser=True)
    admin = Page(browser, live_server.url)
    login(admin, "boss", "pw-boss-123")
    page = admin.go("/queues/")
    page.select_option("#qt-queue", "red")
    page.fill("#qt-quota", "64")
    page.click("#quota-try-run")
    page.wait_for_selector("#quota-try-result:not([hidden])")
    rows = page.locator("#quota-try-result tbody tr")
    assert rows.count() >= 1 and "Nothing was saved" in page.inner_text("#quota-try-status")
    admin.shot("queues-quota-try")
    admin.assert_clean()
    assert (Job.objects.count(), Event.objects.count(), list(Quota.objects.values_list())) == (jobs, events, quotas)


def test_fractional_job_shows_on_the_map(browser, live_server, cluster):
    """Issue 14: a 0.25-GPU job on a shared GPU appears on the topology map zoomed to its domain, its GPU's cell
    saying the share used."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Job, Node, Team

    busy = set(Allocation.objects.filter(released_at__isnull=True).values_list("gpu__node_id", flat=True))
    node = Node.objects.exclude(pk__in=busy).order_by("name").first()
    services.set_gpu_sharing(node, 0, "shared")
    job = services.submit_job(command=SLEEP, team=Team.objects.get(name="red"), queue="red", name="notebook",
                              roles=[{"name": "worker", "tasks": 1, "gpu_fraction": 0.25}])
    cluster["run_cycle"](clock=timezone.now())
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.allocations.get().gpu_milli == 250
    p = Page(browser, live_server.url)
    login(p)
    page = p.go(f"/topology/?zoom={node.domain.name}&job={job.pk}")
    page.wait_for_selector("#topology[data-level=gpus] .main-svg")
    hover = page.evaluate("() => document.getElementById('topology').data.map(t => (t.hovertext || []).join(' ')).join(' ')")
    assert "GPU 0" in hover and "shared, 0.25 used" in hover and "notebook" in hover
    p.shot("topology-fraction")
    p.assert_clean()


def test_cluster_header_keeps_saying_its_figures_are_the_cycles_after_a_poll(browser, live_server, cluster):
    """New-user trial 9, F4: the header's started / pending are that cycle's, the Jobs card's are live; the
    poll (cluster.js) rewrites the header with the same words, and the card keeps its "live" label."""
    p = Page(browser, live_server.url)
    login(p)
    page = p.go("/cluster/")
    first = page.inner_text("#cycle-info")
    cluster["run_cycle"]()
    wait_js(page, f"document.getElementById('cycle-info').textContent != {first!r}", timeout=15_000)  # polled
    assert re.fullmatch(r"cycle \d+ · \d+ ms · in that cycle: \d+ started, \d+ left pending",
                        page.inner_text("#cycle-info").strip()), page.inner_text("#cycle-info")
    assert "live counts, not as the cycle left them" in page.inner_text("section.stats")
    p.assert_clean()
    p.context.close()
