"""New-user trial 12 findings on the API's error messages (notes/trialfix12.md): F6 (gpus_per_task's messages
named the wrong rule or a field not sent), F7 (choice errors without the choices, topology_mode's length rule),
F9 (error paths not in the documented `name[0].field` form). F2 and F5 are in test_bad_input.py, F10 in
test_api_semantics.py."""
from __future__ import annotations

import pytest

from gpuplatform.models import Job

SLEEP = ["sleep", "3600"]


def _job(**role):
    return {"name": "j", "queue": "alpha", "command": SLEEP, "roles": [{"name": "w", "tasks": 1, **role}]}


# --- F6 -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, words", [
    (1e308, "gpus_per_task must be at most 64"),
    (99999999999999999999, "gpus_per_task must be at most 64"),
    (-1e308, "gpus_per_task must not be negative"),
])
def test_a_huge_gpus_per_task_names_its_real_limit(admin, value, words):
    r = admin.post("/api/v1/jobs/", _job(gpus_per_task=value), format="json")
    assert r.status_code == 400 and r.json() == {"roles[0].gpus_per_task": [words]}, r.content


def test_a_too_small_fraction_in_gpus_per_task_is_one_error_on_gpus_per_task(admin):
    """0.0001 was refused on gpu_fraction (not sent) and as "must be a whole number" on gpus_per_task."""
    r = admin.post("/api/v1/jobs/", _job(gpus_per_task=0.0001), format="json")
    assert r.status_code == 400 and r.json() == {"roles[0].gpus_per_task": [
        "gpus_per_task must be a whole number of GPUs, or a fraction of one GPU from 0.001 to 0.999 with at most three "
        "decimals"]}, r.content
    r = admin.post("/api/v1/jobs/", _job(gpu_fraction=0.0001), format="json")
    assert r.status_code == 400 and r.json() == {"roles[0].gpu_fraction": [
        "gpu_fraction must be a fraction of one GPU from 0.001 to 0.999 with at most three decimals, e.g. 0.5"]}, r.content
    assert not Job.objects.exists()


# --- F7 -------------------------------------------------------------------------------------------------------

def test_topology_mode_names_its_choices_however_long(admin):
    for body, field in ((_job() | {"topology_mode": "strictest"}, "topology_mode"),
                        (_job(topology_mode="strictest", group_size=1), "roles[0].topology_mode")):
        r = admin.post("/api/v1/jobs/", body, format="json")
        assert r.status_code == 400 and "must be one of none, soft, hard" in r.json()[field][0], r.content


@pytest.mark.parametrize("method, url, body, field, choices", [
    ("post", "/api/v1/jobs/", _job() | {"numa": "maybe"}, "numa", "prefer, single"),
    ("post", "/api/v1/nodes/n0/sharing/", {"sharing": "half"}, "sharing", "exclusive, shared, auto"),
    ("post", "/api/v1/memberships/", {"team": "alpha", "user": "bob", "role": "king"}, "role", "admin"),
    ("post", "/api/v1/forecast/", {"changes": [{"kind": "explode"}]}, "changes[0].kind", "submit, set_quota"),
])
def test_a_choice_error_lists_the_choices(admin, method, url, body, field, choices):
    r = getattr(admin, method)(url, body, format="json")
    assert r.status_code == 400, r.content
    message = r.json()[field][0]
    assert "one of" in message and choices in message, message


def test_the_state_filter_lists_its_choices_and_ignores_an_empty_value(admin, jobs):
    r = admin.get("/api/v1/jobs/?state=bogus")
    assert r.status_code == 400, r.content
    assert r.json()["state"][0].startswith("unknown state 'bogus'; one of: pending, "), r.json()
    # sent empty, alone or as a second item: a 400 naming it, as every parameter sent empty (trial 20, F3; it was
    # ignored, the whole list)
    for query in ("state=", "state=pending&state="):
        r = admin.get(f"/api/v1/jobs/?{query}")
        assert r.status_code == 400 and list(r.json()) == ["state"], r.content


# --- F9 -------------------------------------------------------------------------------------------------------

def test_a_list_items_error_is_named_by_its_index(admin):
    for value in (-1, 99999999999999999999999):
        r = admin.post("/api/v1/nodes/n0/sharing/", {"sharing": "shared", "gpus": [0, value]}, format="json")
        assert r.status_code == 400 and list(r.json()) == ["gpus[1]"], r.content
    r = admin.post("/api/v1/queues/", {"name": "t12q", "parent": "root",
                                       "quotas": [{"flavor": "A100", "quota": 0},
                                                  {"flavor": "H100", "quota": 5000}]}, format="json")
    assert r.status_code == 400 and list(r.json()) == ["quotas[1].quota"], r.content
