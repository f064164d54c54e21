"""A what-if submit change with explicit roles that can never fit the cluster is refused keyed by the role field
at fault, as job submission keys it (fit_check.refusal_errors, 6b6f0e8): `changes[i].roles[j].gpus_per_task`,
`.cpu_milli`, `.memory_mib`, `.flavors` (the change's name for a role's flavors); `changes[i].roles` only when
the roles together are at fault. It was `changes[i].roles` whatever the field. The submit form's "Estimate start"
(the what-if's caller with roles) files it under the form's own field (roles-1-gpus_per_task, roles-1-flavor).

World: tests/frontend/conftest.py's one node of 8 P100 GPUs (here with 64,000 milli-CPU and 512,000 MiB)."""
from __future__ import annotations

import pytest

from gpuplatform import clock
from gpuplatform.models import Job
from gpuplatform.scheduling.forecast import what_if_live
from scheduler.forecast.whatif import WhatIfError
from tests.frontend.conftest import T0

SMALL = {"name": "a", "tasks": 1, "gpus_per_task": 1}


@pytest.fixture
def sized(world):
    clock.use(lambda: T0)
    node = world["node"]
    node.cpu_milli, node.memory_mib = 64000, 512000
    node.save(update_fields=["cpu_milli", "memory_mib"])
    yield world
    clock.use(None)


def _form(*roles):
    data = {"queue": "red", "roles-TOTAL_FORMS": str(len(roles)), "priority": "0", "preemptible": "on"}
    for i, role in enumerate(roles):
        data.update({f"roles-{i}-{k}": str(v) for k, v in role.items()})
    return data


@pytest.mark.parametrize("second, key, words", [
    ({"name": "b", "tasks": 1, "gpus_per_task": 16}, "roles[1].gpus_per_task", "16 GPUs per task exceeds every"),
    ({"name": "b", "tasks": 1, "gpus_per_task": 1, "cpu_milli": 100000}, "roles[1].cpu_milli",
     "100000 milli-CPU per task exceeds every"),
    ({"name": "b", "tasks": 1, "gpus_per_task": 1, "memory_mib": 600000}, "roles[1].memory_mib",
     "600000 MiB of memory per task exceeds every"),
    ({"name": "b", "tasks": 1, "gpus_per_task": 8}, "roles", "can never fit"),  # 1 + 8 GPUs on 8: together
])
def test_a_never_fitting_role_is_keyed_by_its_field_as_on_submission(client, sized, second, key, words):
    client.force_login(sized["admin"])
    jobs = Job.objects.count()
    with pytest.raises(WhatIfError) as caught:
        what_if_live(sized["admin"], [{"kind": "submit", "id": "ok", "queue": "red", "tasks": 1, "gpus_per_task": 1},
                                      {"kind": "submit", "id": "probe", "queue": "red", "roles": [SMALL, second]}])
    exc = caught.value
    assert (exc.index, exc.field) == (1, key) and str(exc).startswith(f"changes[1].{key}: can never fit"), str(exc)
    assert words in exc.message, exc.message
    # job submission refuses the same roles under the same key, with the same message
    r = client.post("/api/v1/jobs/", {"queue": "red", "name": "big", "command": ["sleep", "1"],
                                      "roles": [SMALL, second]}, content_type="application/json")
    assert r.status_code == 400 and r.json() == {key: [exc.message]}, r.content
    assert Job.objects.count() == jobs


def test_a_role_of_no_flavor_here_is_keyed_by_its_flavors(sized):
    with pytest.raises(WhatIfError) as caught:
        what_if_live(sized["admin"], [{"kind": "submit", "queue": "red",
                                       "roles": [SMALL, {**SMALL, "name": "b", "flavors": ["ZZ"]}]}])
    assert caught.value.field == "roles[1].flavors" and "no node of flavor ZZ" in caught.value.message


@pytest.mark.parametrize("second, field, words", [
    ({"name": "b", "tasks": 1, "gpus_per_task": 16}, "roles-1-gpus_per_task", "16 GPUs per task"),
    ({"name": "b", "tasks": 1, "gpus_per_task": 1, "flavor": "ZZ"}, "roles-1-flavor", "no node of flavor ZZ"),
    ({"name": "b", "tasks": 1, "gpus_per_task": 8}, "roles", "can never fit"),
])
def test_the_submit_forms_estimate_names_the_role_field(client, sized, second, field, words):
    client.force_login(sized["alice"])
    r = client.post("/jobs/new/estimate/", _form(SMALL, second))
    assert r.status_code == 400 and list(r.json()["errors"]) == [field], r.json()
    assert words in r.json()["errors"][field]
