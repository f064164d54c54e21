"""GPU sharing through the platform (issue 14): a mixed node (2 shared, 2 MIG, 4 exclusive GPUs) registered the
way its agent reports it, jobs asking for whole GPUs, fractions, GPU memory and MIG instances submitted over the
REST API and the submit form, one scheduling cycle, and what the database then holds; refusals name the field."""
from __future__ import annotations

from datetime import datetime, timezone as tz

import pytest

from clusterspec.spec import ClusterSpec, QueueSpec

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
H200_MIB = 143_771


def mig_gpu(index: int, layout: list[tuple[str, int, int]]) -> dict:
    return {"index": index, "uuid": f"GPU-{index}", "memory_mib": H200_MIB, "mig_mode": "enabled",
            "mig": [{"uuid": f"MIG-{index}-{k}", "profile": p, "memory_mib": m, "slices": s}
                    for k, (p, m, s) in enumerate(layout)]}


@pytest.fixture
def mixed(db):
    """Node "mixed": GPUs 0-1 shared, 2 = MIG 2 x 3g.71gb, 3 = MIG 7 x 1g.18gb, 4-7 exclusive; queue q (team
    alpha) with an H200 limit of 6 GPUs and 2 instances of 1g.18gb."""
    from gpuplatform import services
    from gpuplatform.models import Node, Queue

    services.load_cluster_spec(ClusterSpec(name="s", nodes=(), queues=(
        QueueSpec("q", team="alpha", quotas={"H200": (0, 6, 6), "H200/mig-1g.18gb": (0, 2, 2)}),)))
    gpus = [{"index": i, "uuid": f"GPU-{i}", "memory_mib": H200_MIB} for i in (0, 1, 4, 5, 6, 7)]
    gpus += [mig_gpu(2, [("3g.71gb", 71_424, 3)] * 2), mig_gpu(3, [("1g.18gb", 16_384, 1)] * 7)]
    node = services.register_node("mixed", flavor="H200", gpus=sorted(gpus, key=lambda g: g["index"]))
    Node.objects.filter(pk=node.pk).update(state="ready")
    for i in (0, 1):
        services.set_gpu_sharing(node, i, "shared")
    return Queue.objects.get(name="q")


@pytest.fixture
def api(mixed, django_user_model):
    from rest_framework.test import APIClient

    from gpuplatform.services import issue_api_token

    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return client


def submit(client, name, role, **extra):
    return client.post("/api/v1/jobs/", {"name": name, "queue": "q", "command": "sleep 1",
                                         "roles": [{"tasks": 1, **role}], **extra}, format="json")


def test_agent_report_sets_mig_layout_and_modes(mixed):
    from gpuplatform.models import Gpu, MigInstance

    modes = dict(Gpu.objects.filter(node__name="mixed").values_list("index", "sharing"))
    assert modes == {0: "shared", 1: "shared", 2: "mig", 3: "mig", 4: "exclusive", 5: "exclusive", 6: "exclusive",
                     7: "exclusive"}
    assert MigInstance.objects.filter(gpu__index=3, profile="1g.18gb").count() == 7
    assert Gpu.objects.get(node__name="mixed", index=0).memory_mib == H200_MIB


def test_mixed_node_cycle_binds_each_kind_to_its_gpus(api):
    from gpuplatform.models import Allocation, Job
    from gpuplatform.scheduling import store

    for name, role in (("whole", {"gpus_per_task": 4}), ("half", {"gpus_per_task": 0.5}),
                       ("quarter", {"gpu_fraction": 0.25}), ("mem", {"gpu_memory_mib": 40_000}),
                       ("mig", {"mig_profile": "1g.18gb", "mig_count": 2}), ("mig3", {"mig_profile": "3g.71gb"})):
        r = submit(api, name, role)
        assert r.status_code == 201, r.content
    assert api.get(f"/api/v1/jobs/{Job.objects.get(name='half').pk}/").json()["roles"][0]["gpu_milli"] == 500
    store.run_cycle_once(clock=CLOCK)
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}
    allocs = {a.job.name: a for a in Allocation.objects.select_related("job", "gpu", "mig_instance")}
    whole = Allocation.objects.filter(job__name="whole")
    assert sorted(a.gpu.index for a in whole) == [4, 5, 6, 7] and all(a.gpu_milli == 0 for a in whole)
    for name, milli in (("half", 500), ("quarter", 250)):
        assert allocs[name].gpu.index in (0, 1) and allocs[name].gpu_milli == milli
    assert allocs["mem"].gpu_memory_mib == 40_000 and allocs["mem"].gpu.index in (0, 1)
    mig = Allocation.objects.filter(job__name="mig")
    assert mig.count() == 2 and {a.gpu.index for a in mig} == {3}
    assert len({a.mig_instance.uuid for a in mig}) == 2
    assert allocs["mig3"].mig_instance.profile == "3g.71gb" and allocs["mig3"].gpu.index == 2
    # the next snapshot sees the shares: no GPU over-committed, whole GPUs held, instances bound
    snap, _ = store.build_snapshot(CLOCK.timestamp())
    node = snap.nodes[0]
    assert node.used == frozenset({4, 5, 6, 7}) and node.gpu_modes[:4] == ("shared", "shared", "mig", "mig")
    shares = [t for j in snap.jobs for t in j.placement if t.gpu_milli]
    per_gpu: dict = {}
    for t in shares:
        per_gpu[t.gpus[0]] = per_gpu.get(t.gpus[0], 0) + t.gpu_milli
    assert len(shares) == 3 and max(per_gpu.values()) <= 1000
    assert sum(len(t.mig) for j in snap.jobs for t in j.placement) == 3


def test_mig_quota_and_fraction_quota_hold_jobs(api, mixed):
    """Fractions count as GPU-equivalents against the H200 limit (set to 5 here), MIG instances against their
    own resource H200/mig-1g.18gb (limit 2)."""
    from gpuplatform.models import Job, Quota
    from gpuplatform.scheduling import store

    Quota.objects.filter(queue=mixed, flavor="H200").update(quota=5, limit=5)
    assert submit(api, "m3", {"mig_profile": "1g.18gb", "mig_count": 3}).status_code == 201
    assert submit(api, "m2", {"mig_profile": "1g.18gb", "mig_count": 2}).status_code == 201
    assert submit(api, "w", {"gpus_per_task": 4}).status_code == 201
    assert submit(api, "f", {"gpu_fraction": 0.9}).status_code == 201
    assert submit(api, "g", {"gpu_fraction": 0.2}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"m3": "pending", "m2": "running", "w": "running", "f": "running", "g": "pending"}
    assert "H200/mig-1g.18gb" in Job.objects.get(name="m3").pending_reason
    assert "limit of H200 reached" in Job.objects.get(name="g").pending_reason  # 4 + 0.9 + 0.2 > 5


@pytest.mark.parametrize("role, field", [
    ({"gpu_fraction": 0.5, "mig_profile": "1g.18gb"}, "roles[0].mig_profile"),
    ({"gpu_fraction": 0.5, "gpu_memory_mib": 1000}, "roles[0].gpu_memory_mib"),
    ({"gpu_fraction": 1.5}, "roles[0].gpu_fraction"),
    ({"gpu_fraction": 0}, "roles[0].gpu_fraction"),  # 0 is no share, never "a whole GPU"
    ({"gpu_fraction": 0.0, "gpus_per_task": 2}, "roles[0].gpu_fraction"),
    ({"gpu_fraction": False}, "roles[0].gpu_fraction"),
    ({"gpu_fraction": 0.5, "gpus_per_task": 2}, "roles[0].gpus_per_task"),
    ({"gpus_per_task": 1.5}, "roles[0].gpus_per_task"),
    ({"mig_count": 2}, "roles[0].mig_count"),
    ({"mig_profile": "big"}, "roles[0].mig_profile"),
    ({"mig_profile": "2g.35gb"}, "roles[0].mig_profile"),  # no node has that profile: can never fit
    ({"gpu_memory_mib": 200_000}, "roles[0].gpu_memory_mib"),  # more memory than any shared GPU has
])
def test_api_refusals_name_the_field(api, role, field):
    from gpuplatform.models import Job

    r = submit(api, "bad", role)
    assert r.status_code == 400, r.content
    assert field in str(r.json()), r.json()
    assert not Job.objects.filter(name="bad").exists()


def test_mixed_roles_run_as_one_gang_through_the_platform(api):
    """A job of a whole-GPU role, a fractional role and a MIG role: accepted, bound in one cycle (one admitted
    event), each role's allocations of its own kind; the next snapshot holds them all."""
    from gpuplatform.models import Allocation, Event, Job
    from gpuplatform.scheduling import store

    r = api.post("/api/v1/jobs/", {"name": "mix", "queue": "q", "command": "sleep 1", "roles": [
        {"name": "trainer", "gpus_per_task": 2}, {"name": "infer", "tasks": 2, "gpu_fraction": 0.5},
        {"name": "tiny", "mig_profile": "1g.18gb", "mig_count": 2}]}, format="json")
    assert r.status_code == 201, r.content
    store.run_cycle_once(clock=CLOCK)
    job = Job.objects.get(name="mix")
    assert job.state == "running"
    rows = {}
    for a in Allocation.objects.filter(job=job).select_related("task__role", "gpu", "mig_instance"):
        rows.setdefault(a.task.role.name, []).append(a)
    assert all(a.gpu.index >= 4 for a in rows["trainer"])  # exclusive GPUs only
    assert len(rows["trainer"]) == 2 and all(a.gpu_milli == 0 and a.mig_instance is None for a in rows["trainer"])
    assert [a.gpu_milli for a in rows["infer"]] == [500, 500] and {a.gpu.index for a in rows["infer"]} <= {0, 1}
    assert len(rows["tiny"]) == 2 and all(a.mig_instance.profile == "1g.18gb" for a in rows["tiny"])
    assert Event.objects.filter(job=job, kind="admitted").count() == 1
    snap, _ = store.build_snapshot(CLOCK.timestamp())
    (info,) = [j for j in snap.jobs if j.name == "mix" or str(j.id) == str(job.pk)]
    assert info.state == "running" and len(info.placement) == 4
    assert snap.nodes[0].used == frozenset(a.gpu.index for a in rows["trainer"])


def test_mixed_roles_one_kind_per_role_still_names_the_field(api):
    r = api.post("/api/v1/jobs/", {"name": "mix", "queue": "q", "command": "sleep 1", "roles": [
        {"name": "a", "gpus_per_task": 1}, {"name": "b", "gpu_fraction": 0.5, "mig_profile": "1g.18gb"}]},
        format="json")
    assert r.status_code == 400 and "roles[1].mig_profile" in str(r.json()), r.content
    r = api.post("/api/v1/jobs/", {"name": "mix", "queue": "q", "command": "sleep 1", "roles": [
        {"name": "a", "gpus_per_task": 9}, {"name": "b", "gpu_fraction": 0.5}]}, format="json")
    assert r.status_code == 400 and "roles[0].gpus_per_task" in r.json(), r.content  # 9 GPUs in one task never fit the node


def test_set_gpu_sharing_refuses_mig_and_busy_gpus(api):
    from gpuplatform import services
    from gpuplatform.models import Node
    from gpuplatform.scheduling import store

    node = Node.objects.get(name="mixed")
    with pytest.raises(services.ValidationError) as e:
        services.set_gpu_sharing(node, 2, "shared")
    assert "sharing" in e.value.errors
    with pytest.raises(services.ValidationError) as e:
        services.set_gpu_sharing(node, 4, "mig")
    assert "sharing" in e.value.errors
    submit(api, "w", {"gpus_per_task": 4})
    store.run_cycle_once(clock=CLOCK)
    with pytest.raises(services.ValidationError) as e:
        services.set_gpu_sharing(node, 4, "auto")
    assert "index" in e.value.errors


def test_submit_form_takes_a_fraction(mixed, client, django_user_model):
    from gpuplatform.models import Job

    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    data = {"name": "nb", "team": "alpha", "queue": "q", "priority": "0", "preemptible": "on",
            "topology_mode": "none", "highest_tier": "", "preferred_tier": "", "time_limit_minutes": "",
            "roles-TOTAL_FORMS": "1", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
            "roles-MAX_NUM_FORMS": "16", "roles-0-name": "worker", "roles-0-tasks": "1",
            "roles-0-gpus_per_task": "1", "roles-0-cpu_milli": "0", "roles-0-memory_mib": "0",
            "roles-0-min_available": "", "roles-0-flavor": "", "roles-0-command": "", "roles-0-gpu_fraction": "0.3",
            "command": "python3 serve.py", "env": "", "working_dir": "", "image": "", "max_restarts": "0",
            "completion_role": ""}
    response = client.post("/jobs/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Job.objects.get(name="nb").roles.get().gpu_milli == 300
    data.update({"name": "nb2", "roles-0-mig_profile": "1g.18gb"})
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200 and not Job.objects.filter(name="nb2").exists()
    assert "one kind of GPU" in response.content.decode()


def test_submit_form_takes_roles_of_different_kinds(mixed, client, django_user_model):
    """The submit form: a whole-GPU role and a fractional role in one job are accepted; a role asking for two
    kinds is refused with the field's message."""
    from gpuplatform.models import Job

    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    data = {"name": "mixnb", "team": "alpha", "queue": "q", "priority": "0", "preemptible": "on",
            "topology_mode": "none", "highest_tier": "", "preferred_tier": "", "time_limit_minutes": "",
            "roles-TOTAL_FORMS": "2", "roles-INITIAL_FORMS": "0", "roles-MIN_NUM_FORMS": "1",
            "roles-MAX_NUM_FORMS": "16", "command": "python3 serve.py", "env": "", "working_dir": "", "image": "",
            "max_restarts": "0", "completion_role": ""}
    for i, (name, extra) in enumerate((("trainer", {"gpus_per_task": "2"}), ("infer", {"gpu_fraction": "0.25"}))):
        data.update({f"roles-{i}-name": name, f"roles-{i}-tasks": "1", f"roles-{i}-gpus_per_task": "1",
                     f"roles-{i}-cpu_milli": "0", f"roles-{i}-memory_mib": "0", f"roles-{i}-min_available": "",
                     f"roles-{i}-flavor": "", f"roles-{i}-command": ""})
        data.update({f"roles-{i}-{k}": v for k, v in extra.items()})
    response = client.post("/jobs/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    roles = {r.name: r for r in Job.objects.get(name="mixnb").roles.all()}
    assert roles["trainer"].gpus_per_task == 2 and roles["trainer"].gpu_milli == 0 and roles["infer"].gpu_milli == 250
    data.update({"name": "mixnb2", "roles-1-mig_profile": "1g.18gb"})
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200 and not Job.objects.filter(name="mixnb2").exists()
    assert "one kind of GPU" in response.content.decode()


def test_assignments_give_mig_uuid_and_fraction_environment(api):
    from gpuplatform.execution.assignments import node_assignments
    from gpuplatform.models import Node
    from gpuplatform.scheduling import store

    submit(api, "mig", {"mig_profile": "3g.71gb"})
    submit(api, "mem", {"gpu_memory_mib": 20_000})
    submit(api, "whole", {"gpus_per_task": 1})
    store.run_cycle_once(clock=CLOCK)
    tasks = {t["job_name"]: t["env"] for t in node_assignments(Node.objects.get(name="mixed"), CLOCK)["tasks"]}
    assert tasks["mig"]["CUDA_VISIBLE_DEVICES"] in ("MIG-2-0", "MIG-2-1")
    assert "GPUPLATFORM_GPU_FRACTION" not in tasks["mig"]
    mem = tasks["mem"]
    assert mem["CUDA_VISIBLE_DEVICES"] in ("GPU-0", "GPU-1") and mem["GPUPLATFORM_GPU_MEMORY_MIB"] == "20000"
    assert mem["GPUPLATFORM_GPU_FRACTION"] == f"{-(-20_000 * 1000 // H200_MIB) / 1000:g}"
    assert mem["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20000M"
    assert tasks["whole"]["CUDA_VISIBLE_DEVICES"] in {f"GPU-{i}" for i in (4, 5, 6, 7)}
    assert "GPUPLATFORM_GPU_FRACTION" not in tasks["whole"]


def test_agent_runs_a_gang_of_fractions_on_one_gpu_together(api, tmp_path):
    """The assignments of a 2 x 0.5 gang packed on one shared GPU, run by a real executor: both tasks start
    at once and meet (each waits for the other's file), as a rendezvous does; a third share waits."""
    import time

    from gpuplatform.agent.executor import ProcessExecutor
    from gpuplatform.execution.assignments import node_assignments
    from gpuplatform.models import Node
    from gpuplatform.scheduling import store
    from tests.agent.proc_helpers import wait_ended

    meet = ("touch $GPUPLATFORM_TASK_INDEX.here; o=$((1 - GPUPLATFORM_TASK_INDEX)); "
            "while [ ! -e $o.here ]; do sleep 0.02; done; echo met")
    r = api.post("/api/v1/jobs/", {"name": "rdv", "queue": "q", "command": ["sh", "-c", meet], "working_dir": str(tmp_path),
                                   "roles": [{"tasks": 2, "gpu_fraction": 0.5}]}, format="json")
    assert r.status_code == 201, r.content
    store.run_cycle_once(clock=CLOCK)
    tasks = node_assignments(Node.objects.get(name="mixed"), CLOCK)["tasks"]
    assert len(tasks) == 2 and tasks[0]["gpus"][0]["uuid"] == tasks[1]["gpus"][0]["uuid"]  # packed on one GPU
    assert tasks[0]["gpus"][0] | {"uuid": "", "index": 0} == {"uuid": "", "index": 0, "share_milli": 500,
                                                              "share_memory_mib": H200_MIB // 2, "memory_mib": H200_MIB}
    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.3)
    try:
        assert [ex.start(t) for t in tasks] == ["started", "started"]
        third = {**tasks[0], "task": tasks[0]["task"] + 1000,
                 "gpus": [{**tasks[0]["gpus"][0], "share_milli": 100}]}
        assert ex.start(third) == "waiting"
        ended = wait_ended(ex, [(t["task"], t["attempt"]) for t in tasks])
        assert [e["exit_code"] for e in ended.values()] == [0, 0]
    finally:
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        ex.poll()


def test_node_sharing_action_is_audited_all_or_none_and_shown(api, mixed, django_user_model):
    from rest_framework.test import APIClient

    from gpuplatform.models import Event, Gpu
    from gpuplatform.services import issue_api_token

    r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "auto", "gpus": [4, 5]}, format="json")
    assert r.status_code == 200, r.content
    modes = {g["index"]: g["sharing"] for g in r.json()["gpus"]}
    assert modes == {0: "shared", 1: "shared", 2: "mig", 3: "mig", 4: "auto", 5: "auto", 6: "exclusive", 7: "exclusive"}
    assert {g["memory_mib"] for g in r.json()["gpus"]} == {H200_MIB}
    assert Event.objects.filter(kind="gpu_sharing", actor__username="ops").count() == 2
    again = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "auto", "gpus": [4, 5]}, format="json")
    assert again.status_code == 200 and again.json()["gpus"] == r.json()["gpus"], again.content
    assert Event.objects.filter(kind="gpu_sharing", actor__username="ops").count() == 2  # the same mode again is no change: no Event
    assert not Event.objects.filter(kind="gpu_sharing", message__contains="auto -> auto").exists()
    r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "shared", "gpus": [6, 2]}, format="json")
    assert r.status_code == 400 and "sharing" in r.json()  # GPU 2 is in MIG mode: GPU 6 is left as it was
    assert Gpu.objects.get(node__name="mixed", index=6).sharing == "exclusive"
    r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "shared", "gpus": [9]}, format="json")
    assert r.status_code == 400 and "gpus" in r.json()
    r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "mig"}, format="json")
    assert r.status_code == 400 and "sharing" in r.json()
    r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "exclusive"}, format="json")  # every non-MIG GPU
    assert r.status_code == 200 and {g["sharing"] for g in r.json()["gpus"]} == {"exclusive", "mig"}
    member = django_user_model.objects.create_user("m", password="pw")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(member)[0]}")
    assert client.post("/api/v1/nodes/mixed/sharing/", {"sharing": "shared"}, format="json").status_code == 403


def test_fraction_job_reports_gpu_equivalents_in_api_and_event(api):
    from gpuplatform.models import Event
    from gpuplatform.scheduling import store

    job = submit(api, "halves", {"tasks": 3, "gpu_fraction": 0.5}).json()
    assert (job["gpus"], job["gpu_request"]) == (1.5, "3x0.5")
    mem = submit(api, "mem", {"gpu_memory_mib": 20_000}).json()
    # pending: its share of the largest shared GPU (trial 16, F12; it read 0 until bound), then the one it got
    assert (mem["gpus"], mem["gpu_request"]) == (-(-20_000 * 1000 // H200_MIB) / 1000, "1x20000MiB")
    store.run_cycle_once(clock=CLOCK)
    assert api.get(f"/api/v1/jobs/{mem['id']}/").json()["gpus"] == -(-20_000 * 1000 // H200_MIB) / 1000
    message = Event.objects.get(kind="admitted", job_id=job["id"]).message
    assert message.endswith("1.5 GPU-equivalents (3 shares of 0.5 GPU)"), message


def test_fraction_gang_above_the_queue_limit_never_fits(api, mixed):
    from gpuplatform import services
    from gpuplatform.models import Job
    from gpuplatform.scheduling import store

    services.set_quota(mixed, "H200", 0, 1, 1)  # 2 shared GPUs hold 4 halves: the limit, not the GPUs, refuses
    job = submit(api, "big", {"tasks": 3, "gpu_fraction": 0.5}).json()  # 1.5 GPU-equivalents, limit 1
    store.run_cycle_once(clock=CLOCK)
    row = Job.objects.get(pk=job["id"])
    assert row.never_fits and row.pending_reason == "needs 1.5 H200 GPU-equivalents, above queue q limit of 1"


@pytest.mark.parametrize("role, holds", [
    ({"tasks": 5, "gpu_fraction": 0.5}, "needs 5 GPU shares of 0.5 GPU at once, exceeds the 2 GPU(s) in mode "
                                        "shared or auto (they hold at most 4)"),
    ({"tasks": 3000, "gpu_fraction": 0.001}, "needs 3000 GPU shares of 0.001 GPU at once, exceeds the 2 GPU(s) "
                                             "in mode shared or auto (they hold at most 2000)"),
    ({"tasks": 7, "gpu_memory_mib": 40_000}, "needs 7 GPU shares of 40000 MiB at once, exceeds the 2 GPU(s) in "
                                             "mode shared or auto (they hold at most 6)"),  # 3 per GPU by memory
    ({"tasks": 3, "gpu_fraction": 0.6, "flavor": "H200"}, "needs 3 GPU shares of 0.6 GPU at once, exceeds the 2 "
                                                          "GPU(s) in mode shared or auto of H200 (they hold at most 2)"),
])
def test_fraction_gang_larger_than_the_shared_gpus_is_refused_at_submission(api, role, holds):
    """Item 6 of newuser2: a gang of shares more than every shared / auto GPU can hold at once is a 400 naming
    the figure (like a whole-GPU gang above the cluster), not a job that waits forever."""
    from gpuplatform.models import Job

    r = submit(api, "huge", role)
    assert r.status_code == 400, r.content
    assert holds in str(r.json()["roles[0].tasks"]), r.json()
    assert not Job.objects.filter(name="huge").exists()


def test_fraction_gang_that_fits_the_shared_gpus_is_accepted(api, mixed):
    """The limit counts the gang's minimum (min_available), the GPUs in mode auto too, and the shares one GPU
    holds (4 x 0.5 on 2 shared GPUs; 6 x 40000 MiB, 3 per 143771 MiB GPU)."""
    from gpuplatform import services
    from gpuplatform.models import Node

    assert submit(api, "four", {"tasks": 4, "gpu_fraction": 0.5}).status_code == 201
    assert submit(api, "mem6", {"tasks": 6, "gpu_memory_mib": 40_000}).status_code == 201
    assert submit(api, "gang4", {"tasks": 9, "min_available": 4, "gpu_fraction": 0.5}).status_code == 201
    assert submit(api, "nine", {"tasks": 9, "gpu_fraction": 0.5}).status_code == 400
    node = Node.objects.get(name="mixed")
    for i in (4, 5, 6, 7):
        services.set_gpu_sharing(node, i, "auto")
    assert submit(api, "nine", {"tasks": 9, "gpu_fraction": 0.5}).status_code == 201  # 6 GPUs hold 12 halves


def test_mig_resource_quota_is_checked_against_the_instances(mixed):
    from gpuplatform import services

    services.set_quota(mixed, "H200/mig-3g.71gb", 0, 2, 2)  # the node has 2 instances of 3g.71gb
    with pytest.raises(services.ValidationError) as e:
        services.set_quota(mixed, "H200/mig-3g.71gb", 0, 3, 3)
    assert "quota" in e.value.errors and "3g.71gb" in e.value.errors["quota"]


def test_queue_page_says_how_shares_count(mixed, client, django_user_model):
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    html = client.get("/queues/").content.decode()
    assert "sharing-quota-note" in html and "H200/mig-1g.18gb" in html
    assert client.get("/docs/concepts/").status_code == 200
    assert 'id="gpu-sharing-fractions-and-mig"' in client.get("/docs/concepts/").content.decode()


def test_topology_zoomed_to_the_node_shows_shares_and_mig_instances(api, client, django_user_model):
    from gpuplatform.scheduling import store
    from scheduler.core.domain_tree import node_domain

    submit(api, "frac", {"gpu_fraction": 0.25})
    submit(api, "mig", {"mig_profile": "1g.18gb", "mig_count": 2})
    store.run_cycle_once(clock=CLOCK)
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    payload = client.get("/topology.json", {"zoom": node_domain("mixed")}).json()
    rows = {r["gpu"]: r for r in payload["rows"]}
    assert {rows[0]["share"], rows[1]["share"]} == {"shared, 0.25 used", "shared, 0 used"}
    assert rows[3]["share"] == "MIG 2 of 7 instances used (1g.18gb x7)"
    assert rows[2]["share"] == "MIG 0 of 2 instances used (3g.71gb x2)" and rows[4]["share"] == ""
    hover = " ".join(h for t in payload["figure"]["data"] for h in t["hovertext"])
    assert "shared, 0.25 used" in hover and "MIG 2 of 7" in hover


def test_fraction_preempted_for_a_higher_priority_fraction_through_the_platform(api, mixed):
    """A 0.6 job at priority 0 on each shared GPU; a 0.6 job at priority 5 preempts one of them: the victim is
    released after its grace period, the share is held for the beneficiary meanwhile (Job.reserved keeps the
    share), and the beneficiary then starts on exactly that share."""
    from datetime import timedelta

    from gpuplatform.models import Allocation, Job
    from gpuplatform.scheduling import store

    mixed.preemption_grace_seconds = 30
    mixed.save(update_fields=["preemption_grace_seconds"])
    for name in ("lo1", "lo2"):
        assert submit(api, name, {"gpu_fraction": 0.6}, priority=0).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}
    assert submit(api, "hi", {"gpu_fraction": 0.6}, priority=5).status_code == 201
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=10))
    states = dict(Job.objects.values_list("name", "state"))
    assert states["hi"] == "pending" and sorted(states[n] for n in ("lo1", "lo2")) == ["preempting", "running"]
    victim = Job.objects.get(state="preempting")
    hi = Job.objects.get(name="hi")
    (held,) = hi.reserved
    gpu = Allocation.objects.get(job=victim).gpu.index
    assert held[3] == [gpu] and held[4] == 600  # [role, index, node, GPUs, milli, memory, MIG]
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=60))  # past the grace period: released, hi starts
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=61))
    hi.refresh_from_db()
    assert hi.state == "running"
    (alloc,) = Allocation.objects.filter(job=hi, released_at__isnull=True)
    assert alloc.gpu.index == gpu and alloc.gpu_milli == 600
    live = Allocation.objects.filter(gpu__index=gpu, released_at__isnull=True)
    assert sum(a.gpu_milli for a in live) <= 1000


def test_sharing_endpoint_refuses_an_empty_or_repeated_gpu_list(api):
    """Second new-user report, item 7: `"gpus": []` set EVERY GPU of the node (an empty list read as "all"),
    and [1, 1] passed. Only an omitted `gpus` means every GPU; an empty list or a repeated index is a 400."""
    from gpuplatform.models import Gpu

    for gpus, words in (([], "at least"), ([4, 4], "twice")):
        r = api.post("/api/v1/nodes/mixed/sharing/", {"sharing": "shared", "gpus": gpus}, format="json")
        assert r.status_code == 400 and words in str(r.json()), r.content
    assert set(Gpu.objects.filter(node__name="mixed", sharing="shared").values_list("index", flat=True)) == {0, 1}


def test_job_fields_take_no_strings_for_numbers_in_json(api):
    """Second new-user report, item 1: "gpus_per_task": "2" and "gpu_fraction": "0.5" were accepted in a JSON
    body (the other integer fields were already strict)."""
    for role in ({"gpus_per_task": "2"}, {"gpus_per_task": " 0.5 "}, {"gpu_fraction": "0.5"}):
        body = {"name": "s", "queue": "q", "command": "true", "roles": [{"name": "w", "tasks": 1, **role}]}
        r = api.post("/api/v1/jobs/", body, format="json")
        field = next(iter(role))
        assert r.status_code == 400 and field in str(r.json()) and "JSON number" in str(r.json()), r.content


def test_snapshot_carries_the_submitted_workload_for_the_fgd_score(api):
    """Snapshot.workload (FGD's target workload): the GPU task shapes submitted lately, whatever became of the
    jobs; MIG and memory-sized requests left out (instances, or a share that depends on the GPU)."""
    from gpuplatform.models import Job
    from gpuplatform.scheduling import store

    for name, role in (("whole", {"gpus_per_task": 4}), ("half", {"gpus_per_task": 0.5}),
                       ("half2", {"gpu_fraction": 0.5}), ("mem", {"gpu_memory_mib": 40_000}),
                       ("mig", {"mig_profile": "1g.18gb"})):
        assert submit(api, name, role).status_code == 201
    Job.objects.filter(name="half2").update(state="cancelled")
    snap, _ = store.build_snapshot(CLOCK.timestamp())
    assert [(m, g, n) for m, g, _, n in snap.workload] == [(500, 1, 2.0), (1000, 4, 1.0)]
    assert len(snap.jobs) == 4  # half2 is not live, yet counted in the workload


def test_the_workload_reads_only_the_most_recent_jobs(api, monkeypatch):
    """The read is bounded by the primary key (job.submitted_at has no index): the shapes of the
    WORKLOAD_JOBS most recent jobs only."""
    from gpuplatform.scheduling import store

    for name, role in (("old", {"gpus_per_task": 4}), ("new1", {"gpus_per_task": 0.5}),
                       ("new2", {"gpu_fraction": 0.5})):
        assert submit(api, name, role).status_code == 201
    monkeypatch.setattr(store, "WORKLOAD_JOBS", 2)
    assert [(m, g, n) for m, g, _, n in store.sharing_workload(CLOCK.timestamp())] == [(500, 1, 2.0)]
    monkeypatch.setattr(store, "WORKLOAD_JOBS", 3)
    assert [(m, g, n) for m, g, _, n in store.sharing_workload(CLOCK.timestamp())] == [(500, 1, 2.0), (1000, 4, 1.0)]


def test_a_node_re_partitioned_after_mig_jobs_ran_registers_its_new_layout(api):
    """Trial 17, F2 (MIG): a node whose GPU was re-partitioned (7 x 1g.18gb -> 2 x 3g.71gb) or had MIG turned off
    after MIG jobs had run on it was answered 409 "still referenced by other objects" at every registration, even
    once the jobs had ended: the node could not register again. Instances only released allocations name are now
    dropped (those allocations keep their GPU and times); one a live allocation holds stays until it is released."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job, MigInstance
    from gpuplatform.scheduling import store

    for name in ("done", "live"):
        assert submit(api, name, {"mig_profile": "1g.18gb"}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    done, live = Job.objects.get(name="done"), Job.objects.get(name="live")
    held = Allocation.objects.get(job=live).mig_instance.uuid
    services.cancel_job(done)
    store.run_cycle_once(clock=CLOCK)
    assert Allocation.objects.get(job=done).released_at is not None
    gpus = [{"index": i, "uuid": f"GPU-{i}", "memory_mib": H200_MIB} for i in (0, 1, 4, 5, 6, 7)]
    gpus += [mig_gpu(2, [("3g.71gb", 71_424, 3)] * 2)]
    new_layout = {"index": 3, "uuid": "GPU-3", "memory_mib": H200_MIB, "mig_mode": "enabled",
                  "mig": [{"uuid": f"MIG-3-new-{k}", "profile": "3g.71gb", "memory_mib": 71_424, "slices": 3}
                          for k in range(2)]}
    services.register_node("mixed", flavor="H200", gpus=sorted(gpus + [new_layout], key=lambda g: g["index"]))
    on3 = set(MigInstance.objects.filter(gpu__index=3).values_list("uuid", flat=True))
    assert on3 == {"MIG-3-new-0", "MIG-3-new-1", held}  # the live job's instance stays while it runs
    history = Allocation.objects.get(job=done)
    assert history.mig_instance is None and history.gpu.index == 3  # the finished job's record keeps its GPU
    services.cancel_job(live)
    store.run_cycle_once(clock=CLOCK)
    off = {"index": 3, "uuid": "GPU-3", "memory_mib": H200_MIB, "mig_mode": "disabled"}
    services.register_node("mixed", flavor="H200", gpus=sorted(gpus + [off], key=lambda g: g["index"]))
    assert not MigInstance.objects.filter(gpu__index=3).exists()
    assert Gpu.objects.get(node__name="mixed", index=3).sharing == "exclusive"
    assert Allocation.objects.filter(job__in=[done, live], mig_instance__isnull=True).count() == 2


def test_a_mig_instance_in_use_that_the_node_no_longer_reports_takes_its_gpu_out_of_service(api):
    """Trial 17c, G3 and G10: after a re-partition (or MIG turned off) under a running MIG job, the instance it holds
    was kept but the GPU went on taking work: a whole-GPU job was bound beside the MIG job (MIG off), or the new
    layout's instances were filled beside the one in use (10 slices of 7). The GPU is now unhealthy and stays in mode
    mig until the job is gone (failure detection requeues it), heartbeats do not undo that, and a registration
    without such an instance makes it healthy again. G2: an instance UUID given twice or another node's is a 400."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job, MigInstance
    from gpuplatform.scheduling import store
    from gpuplatform.scheduling.failures import detect_failures

    assert submit(api, "live", {"mig_profile": "1g.18gb"}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    live = Job.objects.get(name="live")
    held = Allocation.objects.get(job=live).mig_instance
    index = held.gpu.index
    others = [{"index": i, "uuid": f"GPU-{i}", "memory_mib": H200_MIB} for i in range(8) if i not in (2, 3)]
    others += [mig_gpu(2, [("3g.71gb", 71_424, 3)] * 2)] if index != 2 else [mig_gpu(3, [("1g.18gb", 16_384, 1)] * 7)]
    off = {"index": index, "uuid": f"GPU-{index}", "memory_mib": H200_MIB, "mig_mode": "disabled"}
    services.register_node("mixed", flavor="H200", gpus=sorted(others + [off], key=lambda g: g["index"]))
    gpu = Gpu.objects.get(node__name="mixed", index=index)
    assert (gpu.sharing, gpu.health) == ("mig", "unhealthy") and held.uuid in gpu.health_reason
    assert MigInstance.objects.filter(pk=held.pk).exists()
    services.record_heartbeat("mixed", gpus=[{"index": index, "health": "healthy"}])
    assert Gpu.objects.get(pk=gpu.pk).health == "unhealthy"  # only a registration changes it
    assert submit(api, "whole", {"gpus_per_task": 1}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    assert not Allocation.objects.filter(gpu=gpu, job__name="whole").exists()  # never beside the MIG job
    detect_failures(CLOCK)
    assert Job.objects.get(pk=live.pk).state in ("pending", "preempting")  # requeued off the GPU
    store.run_cycle_once(clock=CLOCK)
    assert not Allocation.objects.filter(mig_instance=held, released_at__isnull=True).exists()
    services.register_node("mixed", flavor="H200", gpus=sorted(others + [off], key=lambda g: g["index"]))
    gpu.refresh_from_db()
    assert (gpu.sharing, gpu.health) == ("exclusive", "healthy") and not MigInstance.objects.filter(gpu=gpu).exists()
    # G2: one instance on two GPUs of one request, or another node's instance: 400 naming it, nothing stored
    twice = [mig_gpu(2, [("3g.71gb", 71_424, 3)]), {**mig_gpu(3, [("3g.71gb", 71_424, 3)]),
                                                   "mig": [{**mig_gpu(2, [("3g.71gb", 71_424, 3)])["mig"][0]}]}]
    with pytest.raises(services.ValidationError) as refused:
        services.register_node("other", flavor="H200", gpus=[{**g, "uuid": f"OTHER-{g['index']}"} for g in twice])
    assert list(refused.value.errors) == ["gpus[1].mig[0].uuid"] and "given twice" in str(refused.value)
    theirs = {**mig_gpu(0, [("3g.71gb", 71_424, 3)]), "uuid": "OTHER-0", "mig": mig_gpu(2, [("3g.71gb", 71_424, 3)])["mig"]}
    with pytest.raises(services.ValidationError) as refused:
        services.register_node("other", flavor="H200", gpus=[theirs])
    assert list(refused.value.errors) == ["gpus[0].mig[0].uuid"] and "node mixed" in str(refused.value)
    assert MigInstance.objects.get(uuid="MIG-2-0").gpu.node.name == "mixed"


def test_mig_turned_on_under_a_running_whole_gpu_job_takes_the_gpu_out_of_service(api):
    """Trial 17c, G12: a registration turning MIG on for a GPU a whole-GPU job runs on (which the sharing API
    refuses) succeeded, and MIG jobs were then bound beside that job. The GPU is now unhealthy until the job is gone
    and a registration reports it again."""
    from gpuplatform import services
    from gpuplatform.models import Allocation, Gpu, Job
    from gpuplatform.scheduling import store

    assert submit(api, "whole", {"gpus_per_task": 4}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    index = Allocation.objects.filter(job__name="whole").first().gpu.index
    gpus = [{"index": i, "uuid": f"GPU-{i}", "memory_mib": H200_MIB} for i in range(8) if i not in (2, 3, index)]
    gpus += [mig_gpu(2, [("3g.71gb", 71_424, 3)] * 2), mig_gpu(3, [("1g.18gb", 16_384, 1)] * 7)]
    gpus += [{**mig_gpu(index, [("1g.18gb", 16_384, 1)] * 7), "uuid": f"GPU-{index}",
              "mig": [{"uuid": f"MIG-N-{k}", "profile": "1g.18gb", "memory_mib": 16_384, "slices": 1} for k in range(7)]}]
    services.register_node("mixed", flavor="H200", gpus=sorted(gpus, key=lambda g: g["index"]))
    gpu = Gpu.objects.get(node__name="mixed", index=index)
    assert (gpu.sharing, gpu.health) == ("mig", "unhealthy") and "MIG turned on" in gpu.health_reason
    for i in range(3):
        assert submit(api, f"mig{i}", {"mig_profile": "1g.18gb"}).status_code == 201
    store.run_cycle_once(clock=CLOCK)
    assert not Allocation.objects.filter(gpu=gpu, released_at__isnull=True).exclude(job__name="whole").exists()
    from gpuplatform.scheduling.failures import detect_failures

    detect_failures(CLOCK)
    assert Job.objects.get(name="whole").state in ("pending", "preempting")  # requeued off the GPU
