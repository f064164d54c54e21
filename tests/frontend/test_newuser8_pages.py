"""New-user trial 8 (notes/newuser8.md), the pages' findings: F7 (the job form's role formset is capped and
speaks the API's words), F5 (a pending job's log box), F15 (page JSON endpoints answer 401 JSON)."""
from __future__ import annotations

import html as html_lib

from gpuplatform.models import Job

from tests.frontend.test_dashboards import roles_post


def test_a_huge_roles_total_builds_no_more_forms_than_the_maximum(client, world):
    """F7: roles-TOTAL_FORMS=100000 built 1,016 role forms (Django's absolute_max = max_num + 1000), each with
    three "This field is required.": a 6 MB page. At most 16 forms are built now; nothing is stored."""
    client.force_login(world["alice"])
    jobs = Job.objects.count()
    response = client.post("/jobs/new/", roles_post(**{"roles-TOTAL_FORMS": "100000"}))
    page = html_lib.unescape(response.content.decode())
    assert response.status_code == 200 and Job.objects.count() == jobs
    assert len(response.content) < 300_000, len(response.content)
    assert page.count('name="roles-15-name"') == 1 and 'name="roles-16-name"' not in page
    assert "at most 16 roles" in page


def test_no_roles_says_what_the_api_says(client, world):
    """F7: roles-TOTAL_FORMS=0 gave Django's "Please submit at least 1 form."; the API says "a job needs at
    least one role" (job_rules.NO_ROLES), and so does the form."""
    client.force_login(world["alice"])
    response = client.post("/jobs/new/", roles_post(**{"roles-TOTAL_FORMS": "0"}))
    page = html_lib.unescape(response.content.decode())
    assert response.status_code == 200 and "a job needs at least one role" in page
    assert "Please submit at least" not in page


JSON_ENDPOINTS = ("/cluster/metrics.json", "/topology.json", "/queues/data.json", "/fragmentation/data.json",
                  "/queueing/data.json", "/failures/data.json", "/utilization/data.json")


def test_page_json_endpoints_answer_401_json_without_a_session(client, world):
    """F15: `curl /cluster/metrics.json` was a 302 to the HTML login; the REST API answers a JSON 401. The
    page JSON endpoints do too now; the HTML pages keep their redirect to the login."""
    for url in JSON_ENDPOINTS:
        r = client.get(url)
        assert r.status_code == 401 and r["Content-Type"] == "application/json", (url, r.status_code)
        assert r.json() == {"detail": "Authentication credentials were not provided."}, url
    r = client.post("/jobs/new/estimate/", {})
    assert r.status_code == 401 and r["Content-Type"] == "application/json", r.status_code
    for page in ("/cluster/", "/queues/", "/utilization/", "/jobs/"):
        r = client.get(page)
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/"), page
    client.force_login(world["alice"])
    assert all(client.get(url).status_code == 200 for url in JSON_ENDPOINTS)


def test_queueing_says_all_shown_to_a_platform_admin(client, world):
    """F16 (last note): a platform admin sees every pending job but was told "yours shown". The sentence since
    new-user trial 10's F5 counts what is shown (the page's list stops at 200: "the first 200 shown here")."""
    client.force_login(world["admin"])
    assert "2 pending jobs in the cluster; all 2 shown." in client.get("/queueing/").content.decode()
    client.force_login(world["alice"])
    assert "2 pending jobs in the cluster, 1 of them your teams'; all 1 shown." in client.get("/queueing/").content.decode()


def test_sharing_with_gpus_per_task_blank_gets_the_apis_rule(client, world):
    """F8: MIG instances with "GPUs per task" blanked answered "roles-0-gpus_per_task: This field is required."
    although the help says MIG instances are "instead of whole GPUs"; the API's rule is the message now.
    Blank with no sharing field asks for the number in words."""
    client.force_login(world["alice"])
    jobs = Job.objects.count()
    page = html_lib.unescape(client.post("/jobs/new/", roles_post(**{
        "roles-0-gpus_per_task": "", "roles-0-mig_count": "2"})).content.decode())
    assert "mig_count needs mig_profile" in page and "This field is required." not in page
    page = html_lib.unescape(client.post("/jobs/new/", roles_post(**{"roles-0-gpus_per_task": ""})).content.decode())
    assert "enter the GPUs per task (0 or more), or ask for a GPU fraction" in page
    assert Job.objects.count() == jobs


def test_utilization_filters_naming_nothing_are_a_400_naming_them(client, world):
    """F10: /utilization/data.json?team=nope answered 200 with empty series; topology.json answers 400
    {"team": ["no team named 'nope'"]} (docs/api.md: an unknown value is a 400 naming it). Same check now."""
    client.force_login(world["alice"])
    for param, message in (("team", "no team named 'nope'"), ("queue", "no queue named 'nope'"),
                           ("flavor", "no node has flavor 'nope'")):
        r = client.get(f"/utilization/data.json?{param}=nope")
        assert r.status_code == 400 and r.json()[param][0].startswith(message), (param, r.content)
        assert client.get(f"/utilization/?{param}=nope").status_code == 400
    assert client.get("/topology.json?team=nope").json() == {"team": ["no team named 'nope'"]}
    assert client.get("/utilization/data.json?team=red&queue=red").status_code == 200
