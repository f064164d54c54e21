"""The submit form shows a never-fit refusal next to the field at fault (the service keys it `roles[0].gpus_per_task`,
fit_check.refusal_errors), not above the form as a message about "roles"; the message is the engine's, unchanged.
World: tests/frontend/conftest.py's one node of 8 P100 GPUs."""
from __future__ import annotations

import html as html_lib

from gpuplatform.models import Job

from tests.frontend.test_dashboards import roles_post


def test_the_form_puts_a_never_fit_refusal_on_the_role_field(client, world):
    client.force_login(world["alice"])
    jobs = Job.objects.count()
    r = client.post("/jobs/new/", roles_post(**{"roles-0-gpus_per_task": "16"}))
    assert r.status_code == 200 and Job.objects.count() == jobs
    message = "can never fit this cluster: role worker: 16 GPUs per task exceeds every P100 node (largest has 8)"
    role = r.context["roles"].forms[0]
    assert role.errors == {"gpus_per_task": [message]}, role.errors
    assert not r.context["form"].non_field_errors() and not role.non_field_errors()
    assert message in html_lib.unescape(r.content.decode())


def test_the_form_puts_a_gang_refusal_on_min_available_or_tasks(client, world):
    client.force_login(world["alice"])
    r = client.post("/jobs/new/", roles_post(**{"roles-0-tasks": "3", "roles-0-gpus_per_task": "4"}))
    role = r.context["roles"].forms[0]
    assert r.status_code == 200 and list(role.errors) == ["tasks"], role.errors  # 12 GPUs on one 8-GPU node
    r = client.post("/jobs/new/", roles_post(**{"roles-0-tasks": "4", "roles-0-min_available": "3",
                                                "roles-0-gpus_per_task": "4"}))
    role = r.context["roles"].forms[0]
    assert r.status_code == 200 and list(role.errors) == ["min_available"], role.errors
