"""The submit form and the API judge "1 GPU per task and a GPU fraction of 0.5" alike (new-user trial 25, F5): it is
one kind of request, a share of one GPU (job_rules._check_sharing takes gpus_per_task 1, the form's default, with a
fraction: "omit gpus_per_task or set it to 1"), so neither says "one kind of GPU"; on a cluster where no GPU takes
shares both refuse it with the fit check's words on the fraction's field. gpus_per_task 2 with a fraction is the
rule's refusal in both."""
from __future__ import annotations

import pytest

from tests.platform.test_gpu_sharing import api, mixed  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

FORM = {"name": "nb", "team": "alpha", "queue": "q", "priority": "0", "preemptible": "on",
        "topology_mode": "none", "highest_tier": "", "preferred_tier": "", "time_limit_minutes": "",
        "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
        "roles-MAX_NUM_FORMS": "16", "roles-0-name": "worker", "roles-0-tasks": "1",
        "roles-0-cpu_milli": "0", "roles-0-memory_mib": "0", "roles-0-min_available": "", "roles-0-flavor": "",
        "roles-0-command": "", "roles-0-gpu_fraction": "0.5", "command": "python3 serve.py", "env": "",
        "working_dir": "", "image": "", "max_restarts": "0", "completion_role": ""}


@pytest.mark.parametrize("gpus, words", [
    ("1", "role worker: no GPU in mode shared or auto takes fractions"),
    ("2", "a task with gpu_fraction takes a share of one GPU: omit gpus_per_task or set it to 1"),
])
def test_the_form_says_what_the_api_says(mixed, api, client, django_user_model, gpus, words):  # noqa: F811
    from gpuplatform import services
    from gpuplatform.models import Job, Node

    node = Node.objects.get(name="mixed")
    for i in (0, 1):
        services.set_gpu_sharing(node, i, "exclusive")  # no GPU takes shares now
    r = api.post("/api/v1/jobs/", {"name": "nb", "queue": "q", "command": "sleep 1",
                                   "roles": [{"tasks": 1, "gpus_per_task": int(gpus), "gpu_fraction": 0.5}]},
                 format="json")
    assert r.status_code == 400, r.content
    (field, [message]), = r.json().items()
    assert words in message and "one kind of GPU" not in message, r.json()
    client.force_login(django_user_model.objects.create_user("boss", password="pw", is_staff=True,
                                                             is_superuser=True))
    page = client.post("/jobs/new/", {**FORM, "roles-0-gpus_per_task": gpus})
    html = page.content.decode()
    assert page.status_code == 200 and message in html and "one kind of GPU" not in html  # the API's very words
    assert not Job.objects.filter(name="nb").exists()
