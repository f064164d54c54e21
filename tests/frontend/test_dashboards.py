"""Dashboards (topology, queues, fragmentation, queueing) and the job forms, through Django's test client."""
from __future__ import annotations

import json
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test.client import MULTIPART_CONTENT

from gpuplatform.models import Job, Membership

pytestmark = pytest.mark.django_db

PAGES = ["/topology/", "/queues/", "/fragmentation/", "/queueing/", "/jobs/new/"]
DATA = ["/topology.json", "/queues/data.json", "/fragmentation/data.json", "/queueing/data.json"]


@pytest.mark.parametrize("url", PAGES + DATA)
def test_login_required(client, world, url):
    # pages redirect to the login; their JSON answers 401 JSON as the REST API does (new-user trial 8, F15)
    assert client.get(url).status_code == (401 if url in DATA else 302)


@pytest.mark.parametrize("url", PAGES)
def test_pages_render(client, world, url):
    client.force_login(world["admin"])
    assert client.get(url).status_code == 200


@pytest.mark.parametrize("url", DATA)
def test_data_as_json_and_csv(client, world, url):
    client.force_login(world["admin"])
    payload = client.get(url).json()
    assert payload.get("figures") or payload.get("figure")
    csv = client.get(url + "?format=csv")
    assert csv["Content-Type"].startswith("text/csv") and len(csv.content.decode().splitlines()) >= 2


def test_topology_cluster_level_aggregates_per_domain(client, world):
    client.force_login(world["admin"])
    p = client.get("/topology.json").json()
    assert p["level"] == "domains" and p["gpus"] == 8
    assert p["totals"]["running"] + p["totals"]["borrowed"] == 4 and p["totals"]["free"] == 4
    assert p["rows"] == [{"domain": "nvl-0", "parent": "leaf-0", "gpus": 8, "free": 4, "running": 4, "borrowed": 0,
                          "preempting": 0, "held": 0, "unhealthy": 0, "cordoned": 0, "jobs": 1, "matching_gpus": 4}]


def test_topology_zoom_shows_gpus_and_hides_other_teams_job_names(client, world):
    client.force_login(world["alice"])  # red member; blue's jobs are not hers
    p = client.get("/topology.json?zoom=nvl-0").json()
    assert p["level"] == "gpus" and [d["name"] for d in p["path"]] == ["spine", "leaf-0", "nvl-0"]
    assert {r["job"] for r in p["rows"]} == {"red-running", ""}
    # a zoom naming no domain is a 400 naming it (domain names are public; new-user trial 10, F11: it was a 404)
    r = client.get("/topology.json?zoom=nope")
    assert r.status_code == 400 and "no domain named 'nope'" in r.json()["zoom"][0]
    blue = world["jobs"]["blue-done"]
    assert client.get(f"/topology.json?job={blue.pk}").status_code == 404


@pytest.mark.parametrize("job", ["abc", "-1", "0", "1.5", "99999999999999999999999"])
def test_topology_bad_job_parameter_is_a_json_400_naming_it(client, world, job):
    """New-user report item 15: ?job=abc answered the HTML 404 page; a JSON endpoint answers JSON."""
    client.force_login(world["admin"])
    r = client.get(f"/topology.json?job={job}")
    words = "must be at most 9223372036854775807" if int(job.isdigit() and job) > 2**63 else "job id"  # trial 23
    assert r.status_code == 400 and r["Content-Type"] == "application/json" and words in r.json()["job"][0]
    assert client.get(f"/topology/?job={job}").status_code == 400
    missing = client.get("/topology.json?job=987654")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json" and missing.json()["detail"]


def test_pending_csv_with_nothing_pending_is_a_header(client, world):
    """New-user report item 15: the pending table's CSV with nothing pending was the word "empty"."""
    Job.objects.filter(state="pending").delete()
    client.force_login(world["admin"])
    body = client.get("/queueing/data.json?format=csv&table=pending").content.decode()
    assert body.splitlines() == ["position,overall_position,name,team_name,queue_name,gpus,priority,submitted_at,"
                                 "estimated_start,estimated_start_p90,estimate_note,pending_reason,queue_position"]


def test_queues_page_has_a_figure_per_team_queue(client, world):
    client.force_login(world["alice"])
    figs = client.get("/queues/data.json").json()["figures"]
    assert len(figs) == 2
    names = [t["name"] for t in next(iter(figs.values()))["data"]]
    assert {"used within quota", "borrowed (above quota)", "held (reserved, not started)", "guarantee", "quota",
            "limit", "pending demand"} <= set(names)


def test_queue_chart_draws_the_held_series_from_the_samples(client, world):
    from gpuplatform.models import ClusterSample, QueueSample

    red = world["queues"]["red"]
    QueueSample.objects.filter(queue=red).update(held=3)
    ClusterSample.objects.update(held_gpus=3)  # held not allocated: the cluster's too (trial 19, F8)
    client.force_login(world["alice"])
    figure = client.get("/queues/data.json").json()["figures"][f"q{red.pk}"]
    held = next(t for t in figure["data"] if t["name"] == "held (reserved, not started)")
    assert held["y"] == [3, 3, 3] and held["stackgroup"] == "used"  # stacked on used, one point per sample


def test_queues_page_shows_decayed_usage(client, world):
    """The queue table shows each queue's decayed usage (Queue.recent_usage, summed over flavors; per flavor
    in the cell's title) and the half-life in force (7 days by default)."""
    from gpuplatform.models import Queue

    client.force_login(world["admin"])
    Queue.objects.filter(name="red").update(recent_usage={"H100": 3.25, "A100": 1.0})
    html = client.get("/queues/").content.decode()
    assert "decayed usage" in html and "half-life 7 days" in html
    assert 'title="A100: 1.0, H100: 3.2">4.2</td>' in html or 'title="A100: 1.0, H100: 3.2">4.3</td>' in html
    fragment = client.get("/queues/data.json").json()["html"]["queue-tree"]
    assert "decayed usage" in fragment and ">4." in fragment


def test_queueing_lists_only_visible_pending_jobs_with_positions(client, world):
    client.force_login(world["alice"])
    html = client.get("/queueing/").content.decode()
    assert "red-pending" in html and "blue-pending" not in html
    assert "2 pending jobs in the cluster" in html


def roles_post(**over):
    data = {"name": "train-1", "team": "red", "queue": "red", "priority": "0", "preemptible": "on",
            "topology_mode": "none", "highest_tier": "", "preferred_tier": "", "time_limit_minutes": "",
            "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
            "roles-MAX_NUM_FORMS": "16", "roles-0-name": "worker", "roles-0-tasks": "2",
            "roles-0-gpus_per_task": "2", "roles-0-cpu_milli": "0", "roles-0-memory_mib": "0",
            "roles-0-min_available": "", "roles-0-flavor": "", "roles-0-command": "",
            "command": "python3 train.py --epochs 3", "env": "", "working_dir": "", "image": "",
            "max_restarts": "0", "completion_role": ""}
    data.update(over)
    return data


def test_submit_form_creates_the_job_through_the_service(client, world):
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post())
    job = Job.objects.get(name="train-1")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.submitter == world["alice"] and job.events.filter(kind="submitted").exists()
    assert [(r.tasks, r.gpus_per_task, r.min_available) for r in job.roles.all()] == [(2, 2, 2)]
    assert [r.command for r in job.roles.all()] == [["python3", "train.py", "--epochs", "3"]]


def test_submit_form_sends_interruptible_and_shows_its_rule(client, world):
    """The checkbox reaches the job; interruptible without preemptible is the service's error, on the form."""
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(interruptible="on"))
    assert response.status_code == 302 and Job.objects.get(name="train-1").interruptible is True
    response = client.post("/jobs/new/", roles_post(name="train-2", interruptible="on", preemptible=""))
    assert response.status_code == 200 and "must be preemptible" in response.content.decode()
    assert not Job.objects.filter(name="train-2").exists()


class _Described(HTMLParser):
    """Ids of the page's elements, what each aria-describedby names, and the text of each element by id."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.described: list[str] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        self.described += (attrs.get("aria-describedby") or "").split()
        if tag not in ("input", "br", "meta", "link", "img", "hr"):
            self._open.append(attrs.get("id"))

    def handle_endtag(self, tag):
        if tag not in ("input", "br", "meta", "link", "img", "hr") and self._open:
            self._open.pop()

    def handle_data(self, data):
        for i in self._open:
            if i:
                self.text[i] = self.text.get(i, "") + data


@pytest.mark.parametrize("over, errors", [
    ({"name": "train-2", "interruptible": "on", "preemptible": ""}, {"id_interruptible_error": "must be preemptible"}),
    ({"name": "bad name!", "priority": "1.5", "roles-0-tasks": "abc", "time_limit_minutes": "0",
      "checkpoint_grace_seconds": "0", "min_run_before_move_minutes": "-1", "max_restarts": "-1",
      "env": "1BAD=x", "command": "'unclosed"},
     {"id_name_error": "uses only ASCII letters", "id_priority_error": "whole number", "id_roles-0-tasks_error": "whole number",
      "id_time_limit_minutes_error": "greater than", "id_env_error": "line 1"}),
])
def test_submit_form_every_described_error_is_on_the_page(client, world, over, errors):
    """newuser2 item 5: a field with errors points (aria-describedby) at <id>_error: that element exists and
    holds the message, for the checkboxes (interruptible without preemptible, the service's rule) too."""
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(**over))
    assert response.status_code == 200
    page = _Described()
    page.feed(response.content.decode())
    described = {i for i in page.described if i.endswith("_error")}
    assert set(errors) <= described, set(errors) - described
    assert described <= page.ids, described - page.ids
    for element, message in errors.items():
        assert message in page.text.get(element, ""), (element, page.text.get(element))
    assert not Job.objects.filter(name="train-2").exists()


@pytest.mark.parametrize("over, field, message", [
    ({"roles-0-min_available": "3"}, "min_available", "must not exceed tasks"),
    ({"roles-0-tasks": "0"}, "tasks", "greater than or equal to 1"),
    ({"queue": "blue"}, "queue", "Select a valid choice"),
    ({"highest_tier": "7"}, "highest_tier", "no such tier in this cluster: 7 (tiers: "),  # re-check 24, R5
    ({"name": "bad name!"}, "name", "only ASCII letters"),
])
def test_submit_form_shows_field_errors(client, world, over, field, message):
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(**over))
    assert response.status_code == 200 and message in response.content.decode()
    assert not Job.objects.filter(name="train-1").exists()


@pytest.mark.parametrize("over, field, message", [
    ({"roles-0-tasks": "9" * 23}, "tasks", "less than or equal to"),  # beyond 64 bits: the field's own bound
    ({"roles-0-gpus_per_task": "-" + "9" * 23}, "gpus_per_task", "greater than or equal to"),
    ({"env": "A=1\x00"}, "env", "Null characters are not allowed"),
    ({"command": "echo \x00"}, "command", "Null characters are not allowed"),
    ({"name": "a\x00b"}, "name", "Null characters are not allowed"),
])
def test_submit_form_rerenders_bad_input_the_normaliser_used_to_answer_as_json(client, world, over, field, message):
    """The user's report: these answered a raw JSON 400 instead of the form with its error."""
    client.force_login(world["alice"])
    client.raise_request_exception = False
    for body, kind in ((urlencode(roles_post(**over)), "application/x-www-form-urlencoded"),  # as a browser sends
                       (None, None)):  # multipart, as the test client sends
        response = client.post("/jobs/new/", body, content_type=kind) if body else \
            client.post("/jobs/new/", roles_post(**over))
        html = response.content.decode()
        assert response.status_code == 200 and response["Content-Type"].startswith("text/html"), html[:300]
        assert message in html and 'name="roles-0-tasks"' in html, (field, html[:300])
    assert not Job.objects.filter(name="train-1").exists()


def test_other_form_posts_with_a_nul_are_still_refused_before_any_view(client, world):
    client.force_login(world["alice"])
    for body, kind in ((urlencode({"username": "a\x00", "password": "x"}), "application/x-www-form-urlencoded"),
                       ({"username": "a\x00", "password": "x"}, MULTIPART_CONTENT)):
        r = client.post("/accounts/login/", body, content_type=kind)
        assert r.status_code == 400 and r.json() == {"username": ["NUL characters are not accepted"]}


def test_submit_form_passes_what_the_job_runs(client, world):
    client.force_login(world["alice"])
    post = roles_post(command="""torchrun --nproc-per-node 2 train.py --name 'run one'""",
                      env="# comment\r\nNCCL_DEBUG=INFO\r\n\r\n  DATA_DIR=/data/a=b  \r\nEMPTY=",
                      working_dir="/srv/run", max_restarts="2", time_limit_minutes="90",
                      **{"roles-TOTAL_FORMS": "2", "roles-1-name": "eval", "roles-1-tasks": "1",
                         "roles-1-gpus_per_task": "1", "roles-1-cpu_milli": "0", "roles-1-memory_mib": "0",
                         "roles-1-min_available": "", "roles-1-flavor": "", "roles-1-command": "python3 eval.py"})
    response = client.post("/jobs/new/", post)
    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get(name="train-1")
    assert (job.max_restarts, job.restarts, job.time_limit_seconds, job.simulated) == (2, 0, 5400, False)
    worker, evaluator = job.roles.order_by("id")
    assert worker.command == ["torchrun", "--nproc-per-node", "2", "train.py", "--name", "run one"]
    assert evaluator.command == ["python3", "eval.py"]
    assert worker.env == evaluator.env == {"NCCL_DEBUG": "INFO", "DATA_DIR": "/data/a=b", "EMPTY": ""}
    assert worker.working_dir == evaluator.working_dir == "/srv/run"


@pytest.mark.parametrize("over, field, message", [
    ({"command": ""}, "command", "This field is required."),
    ({"command": "   "}, "command", "This field is required."),
    ({"command": "python3 -c 'print(1)"}, "command", "not a valid shell word list: No closing quotation"),
    ({"env": "GOOD=1\nno equals sign"}, "env", "line 2: expected NAME=value, got &#x27;no equals sign&#x27;"),
    ({"env": "1BAD=x"}, "env", "line 1: &#x27;1BAD&#x27; is not a variable name"),
    ({"env": "A=1\nA=2"}, "env", "line 2: A is already set on line 1"),
    ({"env": "\nRANK=3"}, "env", "line 2: RANK is set by the platform"),
    ({"env": "GPUPLATFORM_JOB_ID=3"}, "env", "line 1: GPUPLATFORM_JOB_ID is set by the platform"),
    ({"max_restarts": "-1"}, "max_restarts", "greater than or equal to 0"),
    ({"roles-0-command": "python3 'x"}, "roles-0-command", "No closing quotation"),
])
def test_submit_form_refuses_bad_commands_and_env_lines(client, world, over, field, message):
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(**over))
    html = response.content.decode()
    assert response.status_code == 200 and message in html, html
    # ... on the field itself: the error follows that field's input inside its .has-error box.
    box = html[html.index(f'id="id_{field}"'):]
    assert message in box[:box.index("</div>")]
    assert not Job.objects.filter(name="train-1").exists()


def test_service_errors_on_what_the_job_runs_land_on_the_fields(client, world):
    from frontend.forms import JobForm, RoleFormSet, apply_service_errors

    client.force_login(world["alice"])
    # No node agent with a container runtime: the service refuses an image, on the image field.
    response = client.post("/jobs/new/", roles_post(image="nvcr.io/nvidia/pytorch:24.05-py3"))
    html = response.content.decode()
    assert response.status_code == 200 and "container runtime" in html
    box = html[html.index('id="id_image"'):]
    assert "container runtime" in box[:box.index("</div>")]
    # Keys the service uses for env and role fields: env.NAME names the line, roles[i].env.X the role's box.
    form = JobForm(roles_post(env="A=1\nB=2"), teams=["red"], queues=[("red", "red")])
    assert form.is_valid(), form.errors
    roles = RoleFormSet(roles_post(), prefix="roles", form_kwargs={"flavors": []})
    assert roles.is_valid()
    apply_service_errors({"env.B": "a value must be a string", "working_dir": "too long",
                          "roles[0].command": "role worker has no command", "roles[0].env.X": "bad name",
                          "max_restarts": "max_restarts must be a whole number from 0 to 100"}, form, roles)
    assert form.errors["env"] == ["line 2: B: a value must be a string"]
    assert form.errors["working_dir"] == ["too long"]
    assert form.errors["max_restarts"] == ["max_restarts must be a whole number from 0 to 100"]
    assert roles.forms[0].errors["command"] == ["role worker has no command"]
    assert roles.forms[0].errors["__all__"] == ["env.X: bad name"]


def test_submit_form_shows_the_run_fields(client, world):
    client.force_login(world["alice"])
    html = client.get("/jobs/new/").content.decode()
    for name in ("command", "env", "working_dir", "image", "max_restarts", "time_limit_minutes", "roles-0-command"):
        assert f'name="{name}"' in html, name
    assert 'placeholder="python3 train.py --epochs 3"' in html
    assert '<input type="text" name="command"' in html and "required" in html[html.index('name="command"'):][:400]


def test_admin_gets_the_queue_team_mismatch_on_the_queue_field(client, world):
    client.force_login(world["admin"])
    response = client.post("/jobs/new/", roles_post(queue="blue"))
    assert response.status_code == 200 and "queue blue belongs to team blue, not red" in response.content.decode()


def test_service_errors_land_on_the_field(client, world):
    client.force_login(world["alice"])
    world["queues"]["red"].state = "closed"
    world["queues"]["red"].save()
    response = client.post("/jobs/new/", roles_post())
    assert response.status_code == 200 and "accepts no new jobs" in response.content.decode()


def test_cancel_needs_post_csrf_and_a_team_role(client, world):
    job = world["jobs"]["red-pending"]
    client.force_login(world["alice"])
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="cancel-job"' in page and "csrfmiddlewaretoken" in page
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"


def test_viewer_reads_but_cannot_cancel_or_submit(client, world):
    viewer = get_user_model().objects.create_user("vic", password="pw-vic-12345")
    Membership.objects.create(user=viewer, team=world["red"], role="viewer")
    client.force_login(viewer)
    job = world["jobs"]["red-pending"]
    assert 'id="cancel-job"' not in client.get(f"/jobs/{job.pk}/").content.decode()
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    assert client.get("/jobs/new/").status_code == 403


def test_ops_with_view_permission_see_every_team_read_only(client, world):
    ops = get_user_model().objects.create_user("ops", password="pw-ops-12345")
    ops.user_permissions.add(Permission.objects.get(codename="view_job", content_type__app_label="gpuplatform"))
    client.force_login(ops)
    html = client.get("/jobs/").content.decode()
    assert "red-running" in html and "blue-pending" in html
    job = world["jobs"]["blue-pending"]
    assert 'id="cancel-job"' not in client.get(f"/jobs/{job.pk}/").content.decode()
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    rows = client.get("/topology.json?zoom=nvl-0").json()["rows"]
    assert "red-running" in {r["job"] for r in rows}


def test_job_page_shows_history_and_the_map_for_a_running_job(client, world):
    client.force_login(world["alice"])
    job = world["jobs"]["red-running"]
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "State history" in html and 'data-job="%d"' % job.pk in html and 'data-zoom="nvl-0"' in html
    json.loads(client.get(f"/topology.json?zoom=nvl-0&job={job.pk}").content)


@pytest.mark.parametrize("placed", ["cluster", "cluster-root"])
def test_a_job_placed_on_the_engines_root_has_a_map_at_the_top_level(client, world, placed):
    """New-user trial 14, F8: a gang across domainless nodes (the local demo's) is placed on the engine's
    synthetic root "cluster", which is no domain of the map: the page asked /topology.json?zoom=cluster (400,
    a console error, a broken panel and link). It asks for the top level now, and what it asks for answers."""
    client.force_login(world["alice"])
    job = world["jobs"]["red-running"]
    Job.objects.filter(pk=job.pk).update(placement_domain=placed, placement_tier=3)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-zoom=""' in html and f'data-job="{job.pk}"' in html and "zoom=cluster" not in html
    assert client.get(f"/topology.json?job={job.pk}").status_code == 200
    assert client.get(f"/topology/?job={job.pk}").status_code == 200


def test_submit_form_takes_numa_and_sub_groups(client, world):
    """The submit form passes numa and a role's sub-group (group size, group tier) to the service, and the
    job page shows them (api-subgroup-tier-limit-ignored.yaml through the form)."""
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(numa="single", **{"roles-0-group_size": "2",
                                                                       "roles-0-group_highest_tier": "1"}))
    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get(name="train-1")
    role = job.roles.get()
    assert (job.numa, role.group_size, role.group_highest_tier, role.group_mode) == ("single", 2, 1, "hard")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "2 tasks per tier-1 domain (hard)" in page and "NUMA single" in page
    bad = client.post("/jobs/new/", roles_post(name="train-2", **{"roles-0-group_size": "2"}))
    assert bad.status_code == 200 and "group_highest_tier" in bad.content.decode()
    assert not Job.objects.filter(name="train-2").exists()


def test_wait_boxes_carry_plotly_quartiles_not_every_wait():
    """Box plots from precomputed statistics (plotly.js's linear quartiles, whiskers at min / max): the
    queueing page's poll carries a few numbers per box however many jobs waited."""
    from frontend.dashboard_figures import wait_figures

    rows = [{"wait_seconds": 3600 * (i % 11), "gpus": 1, "team": "red"} for i in range(11_000)]
    figs = wait_figures(rows)
    box = figs["by_size"]["data"][0]
    assert (box["q1"], box["median"], box["q3"], box["lowerfence"], box["upperfence"]) == ([2.0], [5.0], [8.0], [0.0], [10.0])
    assert "y" not in box and len(json.dumps(figs)) < 5_000
    one = wait_figures([{"wait_seconds": 7200, "gpus": 8, "team": "blue"}])["by_team"]["data"][0]
    assert one["q1"] == one["median"] == one["q3"] == one["lowerfence"] == [2.0]


def _initial(response, field: str) -> str:
    """The value the job form's <select name=field> starts with ("" when no option is selected)."""
    import re
    select = re.search(rf'<select name="{field}".*?</select>', response.content.decode(), re.S).group(0)
    chosen = re.search(r'<option value="([^"]*)"[^>]*selected', select)
    return chosen.group(1) if chosen else ""


def test_job_form_preselects_the_team_of_the_last_job_for_a_user_in_two_teams(client, world):
    """A user in two teams gets no team preselected until they have submitted; then the form starts on the
    team and queue of their last job; `?team=` / `?queue=` choose it explicitly, and one the user may not
    submit to is ignored."""
    Membership.objects.create(user=world["alice"], team=world["blue"])
    client.force_login(world["alice"])
    page = client.get("/jobs/new/")
    assert (_initial(page, "team"), _initial(page, "queue")) == ("", "")
    assert client.post("/jobs/new/", roles_post(team="blue", queue="blue")).status_code == 302
    page = client.get("/jobs/new/")
    assert (_initial(page, "team"), _initial(page, "queue")) == ("blue", "blue")
    page = client.get("/jobs/new/?team=red")
    assert (_initial(page, "team"), _initial(page, "queue")) == ("red", "red")
    page = client.get("/jobs/new/?queue=red")
    assert (_initial(page, "team"), _initial(page, "queue")) == ("red", "red")
    Membership.objects.filter(user=world["alice"], team=world["blue"]).delete()
    page = client.get("/jobs/new/?team=blue&queue=blue")  # no longer a member: ignored, the only team
    assert (_initial(page, "team"), _initial(page, "queue")) == ("red", "red")


@pytest.mark.parametrize("url, header", [
    ("/failures/data.json?format=csv", "category,failed_attempts,gpu_hours_lost"),
    ("/queueing/data.json?format=csv", "team,gpus,wait_seconds"),
    ("/fragmentation/data.json?format=csv", "time,fragmentation_rate,free_gpus,domain_completeness"),
    ("/fragmentation/data.json?format=csv&table=groups", "group,flavor,node_gpus,nodes,free_nodes,schedulable_gpus,"
                                                         "free_gpus,largest_runnable,fragmentation_rate"),
    ("/queues/data.json?format=csv", "queue,time,used,held,guarantee,quota,limit,pending_demand,fair_share"),
    ("/topology.json?format=csv", "domain,parent,gpus,"),
    ("/utilization/data.json?format=csv", "time,"),
])
def test_every_empty_csv_is_its_header_row(client, db, url, header):
    """New-user trial 11, F16: the failures CSV with no failure was the body `empty` (a script reading it got one
    column named "empty"); the same fallback served every page's CSV without rows. An empty table is its header."""
    admin = get_user_model().objects.create_superuser("csv-admin", password="x-secret-1")
    client.force_login(admin)
    r = client.get(url)
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv"), r.content
    lines = r.content.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(header) and "empty" not in lines[0], lines
