"""Review 19a (server side): one canonical UUID comparison (services.nodes.uuid_key: letter case ignored) for the
registration's UUID locks, its held-elsewhere check, its own-row matching, MIG layouts and heartbeat entries: a
lower-case copy of another node's live GPU UUID was accepted as a new GPU (two rows for one physical GPU). And a UUID
names one device: a MIG instance's UUID equal to a GPU's (in the registration or stored) is a 400."""
from __future__ import annotations

import pytest

REGISTER = "/api/v1/nodes/register/"
UUID = "GPU-5A3C0D1E-AAAA-BBBB-CCCC-0123456789AB"
OTHER = "GPU-77E1F0C2-DDDD-EEEE-FFFF-0123456789CD"


def _register(agent, name: str, gpus: list[dict]):
    return agent.post(REGISTER, {"name": name, "flavor": "H100", "gpus": gpus}, format="json")


def _mig(uuid: str) -> dict:
    return {"uuid": uuid, "profile": "3g.40gb", "memory_mib": 40_000, "slices": 3}


@pytest.fixture
def agent(client_for):
    return client_for("agent")


@pytest.fixture
def holder(agent):
    """Node `holder` with GPU 0 = UUID (upper case, as NVML writes it), GPU 1 = OTHER in MIG mode with one instance."""
    r = _register(agent, "holder", [{"index": 0, "uuid": UUID},
                                    {"index": 1, "uuid": OTHER, "mig_mode": "enabled", "mig": [_mig("MIG-HOLDER-1-0")]}])
    assert r.status_code == 201, r.content
    return "holder"


def test_uuid_key_is_one_rule():
    from gpuplatform.services.nodes import uuid_key

    assert uuid_key(UUID) == uuid_key(UUID.lower()) == uuid_key("Gpu-5a3C0D1e-aAaA-BbBb-cCcC-0123456789aB")
    assert uuid_key("MIG-ab") != uuid_key("GPU-ab")
    assert uuid_key("GPU-\u00c9") == "gpu-\u00c9"  # ASCII letters only, as lower() in every database's SQL


@pytest.mark.parametrize("copy", [UUID.lower(), "Gpu-5a3C0D1e-aAaA-BbBb-cCcC-0123456789aB", "gpu-5a3c0d1e-AAAA-bbbb-CCCC-0123456789ab"])
def test_a_copy_of_a_live_gpu_uuid_in_other_letter_case_is_refused(agent, holder, copy):
    from gpuplatform.models import Gpu, Node

    r = _register(agent, "clone", [{"index": 0, "uuid": "GPU-CLONE-0"}, {"index": 1, "uuid": copy}])
    assert r.status_code == 400, r.content
    assert list(r.json()) == ["gpus[1].uuid"], r.content
    why = r.json()["gpus[1].uuid"][0]
    assert why.startswith(f"uuid {copy} ({UUID}, letter case aside) is GPU 0 of node holder: a GPU belongs to one node")
    assert not Node.objects.filter(name="clone").exists()
    assert [g.uuid for g in Gpu.objects.all() if g.uuid.lower() == UUID.lower()] == [UUID]


def test_the_same_uuid_in_two_letter_cases_in_one_registration_is_given_twice(agent):
    r = _register(agent, "twice", [{"index": 0, "uuid": UUID}, {"index": 1, "uuid": UUID.lower()}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[1].uuid"], r.content
    assert "given twice (gpus[0] has it)" in r.json()["gpus[1].uuid"][0]
    r = _register(agent, "twice", [{"index": 0, "uuid": "GPU-x", "mig_mode": "enabled", "mig": [_mig("MIG-A")]},
                                   {"index": 1, "uuid": "GPU-y", "mig_mode": "enabled", "mig": [_mig("mig-a")]}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[1].mig[0].uuid"], r.content
    assert "given twice (gpus[0].mig[0] has it)" in r.json()["gpus[1].mig[0].uuid"][0]
    r = _register(agent, "twice", [{"index": 0, "uuid": "GPU-x", "mig_mode": "enabled",
                                    "mig": [_mig("MIG-A"), _mig("MIG-A")]}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[0].mig[1].uuid"], r.content


def test_a_node_registering_its_own_gpu_in_other_letter_case_keeps_the_row(agent, holder):
    from gpuplatform.models import Gpu, MigInstance

    row = Gpu.objects.get(uuid=UUID)
    inst = MigInstance.objects.get(uuid="MIG-HOLDER-1-0")
    r = _register(agent, "holder", [{"index": 0, "uuid": OTHER.lower(), "mig_mode": "enabled",
                                     "mig": [_mig("mig-holder-1-0")]},
                                    {"index": 1, "uuid": UUID.lower()}])  # renumbered, and sent in lower case
    assert r.status_code == 201, r.content
    rows = {g.index: g for g in Gpu.objects.filter(node__name="holder")}
    assert sorted(rows) == [0, 1]
    assert rows[1].pk == row.pk and rows[1].uuid == UUID.lower()  # the same row, as the agent now spells it
    assert MigInstance.objects.count() == 1
    again = MigInstance.objects.get()
    assert again.pk == inst.pk and again.uuid == "mig-holder-1-0" and again.gpu_id == rows[0].pk
    assert rows[0].sharing == "mig" and rows[0].health == "healthy"


def test_another_nodes_mig_instance_in_other_letter_case_is_refused(agent, holder):
    r = _register(agent, "thief", [{"index": 0, "uuid": "GPU-THIEF-0", "mig_mode": "enabled",
                                    "mig": [_mig("mig-holder-1-0")]}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[0].mig[0].uuid"], r.content
    assert "is a MIG instance of GPU 1 of node holder" in r.json()["gpus[0].mig[0].uuid"][0]


def test_a_lost_gpu_moves_to_the_node_that_registers_it_in_other_letter_case(agent, holder, users):
    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job
    from tests.api.test_trialfix18b import _run_one_on

    row = Gpu.objects.get(uuid=UUID)
    job, held = _run_one_on("holder", users, gpus=1)  # a history on GPU 0: holder's next registration keeps it
    assert held == [0]
    services.cancel_job(Job.objects.get(pk=job.pk))
    assert not Allocation.objects.filter(gpu=row, released_at__isnull=True).exists()
    assert _register(agent, "holder", [{"index": 1, "uuid": OTHER}]).status_code == 201
    assert Gpu.objects.get(pk=row.pk).out_of_service == "not_reported"
    r = _register(agent, "newhome", [{"index": 0, "uuid": UUID.lower()}])
    assert r.status_code == 201, r.content
    moved = Gpu.objects.get(pk=row.pk)
    assert moved.node.name == "newhome" and moved.uuid == UUID.lower() and moved.out_of_service == ""
    assert Gpu.objects.filter(uuid__iexact=UUID).count() == 1


def test_a_heartbeat_entry_names_its_gpu_by_uuid_in_any_letter_case(agent, holder):
    from gpuplatform.models import Gpu

    r = agent.post("/api/v1/nodes/holder/heartbeat/", {"gpus": [
        {"index": 1, "uuid": UUID.lower(), "health": "unhealthy", "health_reason": "XID 79"}]}, format="json")
    assert r.status_code == 200, r.content
    assert Gpu.objects.get(uuid=UUID).health == "unhealthy"  # GPU 0 (its UUID), not GPU 1 (the index sent)
    assert Gpu.objects.get(uuid=OTHER).health == "healthy"
    r = agent.post("/api/v1/nodes/holder/heartbeat/", {"gpus": [{"index": 0, "uuid": UUID}, {"index": 1,
                                                                                             "uuid": UUID.lower()}]},
                   format="json")
    assert r.status_code == 400 and list(r.json()) == ["gpus[1].uuid"], r.content


def test_the_service_refuses_a_copy_in_other_letter_case_as_the_api_does(holder):
    """register_node itself (the API's service) raises the ValidationError, naming the field."""
    from gpuplatform import services
    from gpuplatform.errors import ValidationError

    with pytest.raises(ValidationError) as refused:
        services.register_node("svc", flavor="H100", gpus=[{"index": 0, "uuid": UUID.lower()}])
    assert list(refused.value.errors) == ["gpus[0].uuid"]


# ----------------------------------------------------------------------------------- a UUID names one device
@pytest.mark.parametrize("gpus,field", [
    # its own GPU's UUID
    ([{"index": 0, "uuid": "GPU-ONE", "mig_mode": "enabled", "mig": [_mig("GPU-ONE")]}], "gpus[0].mig[0].uuid"),
    # ... in other letter case
    ([{"index": 0, "uuid": "GPU-ONE", "mig_mode": "enabled", "mig": [_mig("MIG-X"), _mig("gpu-one")]}],
     "gpus[0].mig[1].uuid"),
    # another GPU's of the same registration, listed after it
    ([{"index": 0, "uuid": "GPU-ONE", "mig_mode": "enabled", "mig": [_mig("GPU-TWO")]}, {"index": 1, "uuid": "GPU-TWO"}],
     "gpus[0].mig[0].uuid"),
    # ... listed before it
    ([{"index": 0, "uuid": "GPU-TWO"}, {"index": 1, "uuid": "GPU-ONE", "mig_mode": "enabled", "mig": [_mig("GPU-TWO")]}],
     "gpus[1].mig[0].uuid"),
])
def test_a_mig_instance_uuid_that_is_a_gpu_uuid_of_the_registration_is_refused(agent, gpus, field):
    from gpuplatform.models import Node

    r = _register(agent, "mixed", gpus)
    assert r.status_code == 400 and list(r.json()) == [field], r.content
    why = r.json()[field][0]
    assert "is the UUID of GPU gpus[" in why and "a UUID names one device: one GPU or one MIG instance" in why
    assert not Node.objects.filter(name="mixed").exists()


@pytest.mark.parametrize("copy", [UUID, UUID.lower()])
def test_a_mig_instance_uuid_that_is_a_stored_gpu_uuid_is_refused(agent, holder, copy):
    from gpuplatform.models import MigInstance

    r = _register(agent, "other", [{"index": 0, "uuid": "GPU-OTHER-0", "mig_mode": "enabled", "mig": [_mig(copy)]}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[0].mig[0].uuid"], r.content
    why = r.json()["gpus[0].mig[0].uuid"][0]
    assert "is the UUID of GPU 0 of node holder: a UUID names one device" in why
    # this node's own GPU too: holder's GPU 0 given as an instance of its GPU 1
    r = _register(agent, "holder", [{"index": 0, "uuid": "GPU-REPLACED"},
                                    {"index": 1, "uuid": OTHER, "mig_mode": "enabled", "mig": [_mig(copy)]}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[1].mig[0].uuid"], r.content
    assert not MigInstance.objects.filter(uuid__iexact=UUID).exists()


@pytest.mark.parametrize("copy", ["MIG-HOLDER-1-0", "mig-holder-1-0"])
def test_a_gpu_uuid_that_is_a_stored_mig_instance_uuid_is_refused(agent, holder, copy):
    from gpuplatform.models import Gpu

    r = _register(agent, "other", [{"index": 0, "uuid": "GPU-OTHER-0"}, {"index": 1, "uuid": copy}])
    assert r.status_code == 400 and list(r.json()) == ["gpus[1].uuid"], r.content
    why = r.json()["gpus[1].uuid"][0]
    assert "is MIG instance 3g.40gb of GPU 1 of node holder: a UUID names one device" in why
    assert not Gpu.objects.filter(uuid__iexact="MIG-HOLDER-1-0").exists()


def test_the_service_refuses_a_gpu_mig_uuid_as_the_api_does(holder):
    """register_node itself (the API's service) raises the ValidationError, naming the field."""
    from gpuplatform import services
    from gpuplatform.errors import ValidationError

    with pytest.raises(ValidationError) as refused:
        services.register_node("svc", flavor="H100", gpus=[{"index": 0, "uuid": "GPU-S", "mig_mode": "enabled",
                                                             "mig": [_mig("gpu-s")]}])
    assert list(refused.value.errors) == ["gpus[0].mig[0].uuid"]


# ------------------------------------------------------------------------ a MIG instance's fields within their columns
@pytest.mark.parametrize("inst,field", [
    ({"uuid": "MIG-" + "x" * 77, "profile": "3g.40gb"}, "gpus[0].mig[0].uuid"),
    ({"uuid": "MIG-long-profile", "profile": "p" * 33}, "gpus[0].mig[0].profile"),
    ({"uuid": "MIG-big-memory", "profile": "3g.40gb", "memory_mib": 2**31}, "gpus[0].mig[0]"),
    ({"uuid": "MIG-big-slices", "profile": "3g.40gb", "slices": 2**15}, "gpus[0].mig[0]"),
    ({"uuid": "MIG-bool-slices", "profile": "3g.40gb", "slices": True}, "gpus[0].mig[0]"),
])
def test_a_mig_instance_beyond_its_columns_is_a_400_naming_the_field(agent, inst, field):
    """A MIG uuid over 80 characters, a profile over 32, memory or slices beyond their columns answered a 500 (the
    database refused the write)."""
    from gpuplatform.models import Node

    r = _register(agent, "wide", [{"index": 0, "uuid": "GPU-WIDE", "mig_mode": "enabled", "mig": [inst]}])
    assert r.status_code == 400 and list(r.json()) == [field], r.content
    assert not Node.objects.filter(name="wide").exists()
    ok = {**inst, "uuid": inst["uuid"][:80], "profile": inst["profile"][:32], "memory_mib": 2**31 - 1, "slices": 7}
    r = _register(agent, "wide", [{"index": 0, "uuid": "GPU-WIDE", "mig_mode": "enabled", "mig": [ok]}])
    assert r.status_code == 201, r.content
