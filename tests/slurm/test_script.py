"""The Slurm batch job one gang becomes (gpuplatform/slurm/script.py) and the CLI's reading of real Slurm
output (gpuplatform/slurm/cli.py, tests/slurm/recorded/). No Slurm needed: the launcher is run with bash
under the variables slurmd would give it."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from gpuplatform.slurm.cli import (SlurmCLI, SlurmError, combined_state, expand_hostlist, parse_gres_indices,
                                   parse_jobcomp)
from gpuplatform.slurm.script import GangTask, ShapeError, build_job, job_name, layout, parse_job_name
from tests.slurm.fake import FakeSlurm, recorded


def gang(nodes=("gpn2", "gpn1"), per_node=2, gpus=1):
    tasks, tid = [], 10
    for n in nodes:
        for _ in range(per_node):
            tasks.append(GangTask(task=tid, node=n, argv=("python3", "-c", "print('it''s')"),
                                  env={"GPUPLATFORM_JOB_ID": "7", "USER_VAR": "a b $x", "RANK": "99",
                                       "CUDA_VISIBLE_DEVICES": "GPU-uuid"}, working_dir="", gpus=gpus))
            tid += 1
    return tasks


def sbatch_options(batch: str) -> dict:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", batch, re.M))


def test_placement_batch_asks_for_exactly_the_chosen_nodes(tmp_path):
    s = build_job(gang(), job_id=7, attempt=2, output_dir=str(tmp_path), partition="gpuplatform", master_port=20450,
                  time_limit_seconds=90, grace_seconds=45, addresses={"gpn1": "10.0.0.1", "gpn2": "10.0.0.2"})
    opts = sbatch_options(s.batch)
    assert opts["job-name"] == "gpp-7-a2" and opts["partition"] == "gpuplatform"
    assert opts["nodelist"] == "gpn2,gpn1" and opts["nodes"] == "2" and opts["ntasks-per-node"] == "2"
    assert opts["gres"] == "gpu:2"  # 2 tasks x 1 GPU on each node
    assert opts["time"] == "3"  # (90 + 45) s rounded up to minutes
    assert f"--output={tmp_path}/step-0-%t.out" in s.batch and "--ntasks=4" in s.batch
    assert (s.nodes, s.tasks_per_node, s.gpus_per_task) == (["gpn2", "gpn1"], 2, 1)
    assert "hetjob" not in s.batch and "--het-group" not in s.batch and not s.heterogeneous  # one shape: one job


def test_admission_batch_leaves_the_nodes_to_slurm(tmp_path):
    s = build_job(gang(), job_id=7, attempt=0, output_dir=str(tmp_path), partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0, mode="admission")
    opts = sbatch_options(s.batch)
    assert "nodelist" not in opts and "time" not in opts and opts["nodes"] == "2"
    assert 'key="$C/$SLURM_PROCID"' in s.launch


def role_task(task, node, gpus, role, index):
    return GangTask(task=task, node=node, argv=("bash", "-c", "env"),
                    env={"GPUPLATFORM_ROLE": role, "GPUPLATFORM_TASK_INDEX": str(index)}, working_dir="", gpus=gpus)


def components_of(batch: str) -> list[dict]:
    """The #SBATCH options of each het component, in order."""
    return [sbatch_options(part) for part in re.split(r"^#SBATCH hetjob$", batch, flags=re.M)]


def launcher_and_workers(launcher_node="a"):
    """One launcher (1 GPU) on `launcher_node`, then two workers with 8 GPUs each on b and c: the roles' ranks."""
    return [role_task(10, launcher_node, 1, "launcher", 0), role_task(11, "b", 8, "worker", 0),
            role_task(12, "c", 8, "worker", 1)]


def test_a_gang_whose_roles_differ_is_one_heterogeneous_job_with_a_component_per_shape(tmp_path):
    s = build_job(launcher_and_workers(), job_id=7, attempt=1, output_dir=str(tmp_path), partition="gp",
                  master_port=20450, time_limit_seconds=60, grace_seconds=0)
    assert s.heterogeneous and s.batch.count("#SBATCH hetjob") == 1
    c0, c1 = components_of(s.batch)
    assert (c0["nodelist"], c0["nodes"], c0["ntasks-per-node"], c0["gres"]) == ("a", "1", "1", "gpu:1")
    assert (c1["nodelist"], c1["nodes"], c1["ntasks-per-node"], c1["gres"]) == ("b,c", "2", "1", "gpu:8")
    for c in (c0, c1):  # every component is a job record of its own: name, partition, time limit, no requeue
        assert (c["job-name"], c["partition"], c["time"]) == ("gpp-7-a1", "gp", "1")
    assert "output" in c0 and "output" not in c1  # the batch shell runs in the first component
    step = [line for line in s.batch.splitlines() if line.startswith("exec srun")][0]
    g0, g1 = step[len("exec srun "):].split(" : ")
    assert g0.startswith("--het-group=0 ") and "--ntasks=1 " in g0 and g0.endswith(f"{tmp_path}/launch.sh 0")
    assert g1.startswith("--het-group=1 ") and "--ntasks=2 " in g1 and g1.endswith(f"{tmp_path}/launch.sh 1")
    assert f"--output={tmp_path}/step-1-%t.out" in g1  # per-task files per component
    assert s.nodes == ["a", "b", "c"]
    assert s.describe() == ("heterogeneous job of 2 components: a x 1 task(s) with 1 GPU(s); "
                            "b,c x 1 task(s) with 8 GPU(s)")


def test_components_follow_node_shapes_in_rank_order():
    # uneven task counts in one role: a holds 2, b holds 1 -> two components
    uneven = layout(gang(nodes=("a",), per_node=2) + gang(nodes=("b",), per_node=1))
    assert [(c.nodes, c.tasks_per_node, c.gpus_per_node) for c in uneven] == [(("a",), 2, 2), (("b",), 1, 1)]
    # the launcher on a worker's node: that node's shape is (2 tasks, 9 GPUs), the other worker's (1, 8);
    # a node is never in two components (Slurm refuses het components that share a node)
    shared = layout(launcher_and_workers(launcher_node="b"))
    assert [(c.nodes, c.tasks_per_node, c.gpus_per_node) for c in shared] == [(("b",), 2, 9), (("c",), 1, 8)]
    assert [(t.task, i, local, off) for t, i, local, off in shared[0].slots] == [(10, 0, 0, 0), (11, 0, 1, 1)]
    # one shape everywhere, even with different GPUs per task on a node: one component, no het job
    mixed = [role_task(1, "a", 1, "l", 0), role_task(2, "a", 2, "w", 0), role_task(3, "b", 1, "l", 1),
             role_task(4, "b", 2, "w", 1)]
    assert len(layout(mixed)) == 1
    with pytest.raises(ShapeError, match="no task"):
        layout([])
    with pytest.raises(ValueError, match="mode"):
        build_job(gang(), job_id=1, attempt=0, output_dir="/x", partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0, mode="kubernetes")


def test_heterogeneous_launcher_gives_each_rank_its_variables_across_the_whole_gang(tmp_path):
    """What slurmd gives a task of the second component in one `srun ... : ...` step (recorded from Slurm
    22.05: SLURM_PROCID, SLURM_NODEID and SLURM_NTASKS span every component, SLURM_LOCALID is per node)."""
    s = build_job(launcher_and_workers(launcher_node="b"), job_id=7, attempt=0, output_dir=str(tmp_path),
                  partition="p", master_port=20450, time_limit_seconds=None, grace_seconds=0,
                  addresses={"b": "10.0.0.2", "c": "10.0.0.3"})
    het = {"SLURM_JOB_NODELIST": "b,c", "SLURM_JOB_NODELIST_HET_GROUP_0": "b", "SLURM_JOB_NODELIST_HET_GROUP_1": "c",
           "SLURM_NTASKS": "3", "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(9)))}
    # component 0 on b: the launcher (1 GPU) and worker 0 (8 GPUs) share b's 9 GPUs
    r = run_launcher(s.launch, tmp_path, "0", **het, SLURMD_NODENAME="b", SLURM_LOCALID="1", SLURM_PROCID="1",
                     SLURM_NODEID="0")
    assert r.returncode == 0, r.stderr
    w0 = env_of(tmp_path, 11)
    assert (w0["GPUPLATFORM_ROLE"], w0["GPUPLATFORM_TASK_INDEX"]) == ("worker", "0")
    assert (w0["RANK"], w0["NODE_RANK"], w0["LOCAL_RANK"], w0["WORLD_SIZE"], w0["LOCAL_WORLD_SIZE"]) == \
        ("1", "0", "1", "3", "2")
    assert w0["CUDA_VISIBLE_DEVICES"] == "1,2,3,4,5,6,7,8"  # after the launcher's GPU 0
    assert w0["MASTER_ADDR"] == "10.0.0.2" and w0["MASTER_PORT"] == "20450"
    # component 1 on c: worker 1; the rendezvous is still the first component's first node
    r = run_launcher(s.launch, tmp_path, "1", **{**het, "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(8)))},
                     SLURMD_NODENAME="c", SLURM_LOCALID="0", SLURM_PROCID="2", SLURM_NODEID="1")
    assert r.returncode == 0, r.stderr
    w1 = env_of(tmp_path, 12)
    assert (w1["GPUPLATFORM_ROLE"], w1["RANK"], w1["NODE_RANK"], w1["LOCAL_RANK"], w1["WORLD_SIZE"]) == \
        ("worker", "2", "1", "0", "3")
    assert w1["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and w1["MASTER_ADDR"] == "10.0.0.2"
    # the same node and local id in the other component is not this task
    r = run_launcher(s.launch, tmp_path, "0", **het, SLURMD_NODENAME="c", SLURM_LOCALID="0", SLURM_PROCID="2",
                     SLURM_NODEID="1")
    assert r.returncode == 97 and "no platform task for 0/c/0" in r.stderr


def test_heterogeneous_admission_job_leaves_each_components_nodes_to_slurm(tmp_path):
    s = build_job(launcher_and_workers(), job_id=7, attempt=0, output_dir=str(tmp_path), partition="p",
                  master_port=1, time_limit_seconds=None, grace_seconds=0, mode="admission")
    c0, c1 = components_of(s.batch)
    assert "nodelist" not in c0 and "nodelist" not in c1
    assert (c0["nodes"], c0["gres"], c1["nodes"], c1["gres"]) == ("1", "gpu:1", "2", "gpu:8")
    # Slurm's global rank order: component 0's tasks, then component 1's
    assert "  0/0) T=10;" in s.launch and "  1/1) T=11;" in s.launch and "  1/2) T=12;" in s.launch


def test_job_names_round_trip():
    assert parse_job_name(job_name(12, 3)) == (12, 3)
    assert parse_job_name("wrap") is None and parse_job_name("gpp-x-a1") is None and parse_job_name("xgpp-1-a1") is None


def run_launcher(launch: str, tmp_path, *args, **slurm_env) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_NODELIST": "gpn[1-2]", "SLURM_NTASKS": "4",
           "CUDA_VISIBLE_DEVICES": "0,1", **slurm_env}
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    return subprocess.run(["/bin/bash", str(path), *args], env=env, capture_output=True, text=True, timeout=30)


def env_of(tmp_path, task: int) -> dict:
    return dict(line.split("=", 1) for line in (tmp_path / f"task-{task}.out").read_text().splitlines() if "=" in line)


def test_launcher_runs_the_nodes_own_task_with_slurms_rank_variables(tmp_path):
    tasks = [GangTask(task=10 + i, node=n, argv=("bash", "-c", "env; exit 3" if i == 3 else "env"),
                      env={"GPUPLATFORM_JOB_ID": "7", "GPUPLATFORM_TASK_INDEX": str(i), "USER_VAR": "a b $x",
                           "RANK": "99"}, working_dir="", gpus=1)
             for i, n in enumerate(("gpn2", "gpn2", "gpn1", "gpn1"))]
    s = build_job(tasks, job_id=7, attempt=0, output_dir=str(tmp_path), partition="p", master_port=20450,
                  time_limit_seconds=None, grace_seconds=0, addresses={"gpn1": "10.0.0.1", "gpn2": "10.0.0.2"})
    # Slurm orders the step's nodes by name: gpn1 is node 0 (ranks 0-1), gpn2 node 1 (ranks 2-3)
    r = run_launcher(s.launch, tmp_path, SLURMD_NODENAME="gpn1", SLURM_LOCALID="1", SLURM_PROCID="1",
                     SLURM_NODEID="0")
    assert r.returncode == 3, r.stderr
    env = dict(line.split("=", 1) for line in (tmp_path / "task-13.out").read_text().splitlines() if "=" in line)
    assert env["GPUPLATFORM_TASK_INDEX"] == "3" and env["USER_VAR"] == "a b $x"
    assert (env["RANK"], env["NODE_RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == \
        ("1", "0", "1", "4", "2")
    assert env["MASTER_PORT"] == "20450"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # its slice of the node's GPUs: local task 1 of 2, one GPU each
    assert (tmp_path / "task-13.exit").read_text().strip() == "exit 3"
    assert int((tmp_path / "task-13.started").read_text()) > 0
    assert not (tmp_path / "task-10.out").exists()


def test_launcher_reports_a_signal_and_refuses_an_unknown_task(tmp_path):
    s = build_job([GangTask(task=5, node="gpn1", argv=("bash", "-c", "kill -TERM $$"), env={}, working_dir="",
                            gpus=0)], job_id=1, attempt=0, output_dir=str(tmp_path), partition="p",
                  master_port=1, time_limit_seconds=None, grace_seconds=0)
    run_launcher(s.launch, tmp_path, SLURMD_NODENAME="gpn1", SLURM_LOCALID="0", SLURM_PROCID="0", SLURM_NODEID="0")
    assert (tmp_path / "task-5.exit").read_text().strip() == "signal 15"
    r = run_launcher(s.launch, tmp_path, SLURMD_NODENAME="gpn9", SLURM_LOCALID="0", SLURM_PROCID="0",
                     SLURM_NODEID="0")
    assert r.returncode == 97 and "no platform task for 0/gpn9/0" in r.stderr


def test_hostlists_gres_and_jobcomp():
    assert expand_hostlist("gpn[1-3,7],login,n[01-02]") == ["gpn1", "gpn2", "gpn3", "gpn7", "login", "n01", "n02"]
    assert expand_hostlist("") == []
    assert parse_gres_indices("gpu:2(IDX:0-1)") == [0, 1]
    assert parse_gres_indices("gpu:a100:3(IDX:0,2-3)") == [0, 2, 3]
    assert parse_gres_indices("gpu:1") == []
    comp = parse_jobcomp(recorded("jobcomp.txt"))
    assert comp["1"]["JobState"] == "CANCELLED" and comp["1"]["Name"] == "gpp-7-a0"
    assert comp["1"]["NodeList"] == "gpn[1-2]"


def test_cli_reads_recorded_squeue_and_sinfo():
    """The parsing of outputs recorded from a real Slurm 22.05 (tests/slurm/recorded/README.md)."""
    answers = {"squeue": recorded("squeue_after_cancel.json"), "sinfo": recorded("sinfo.json")}

    def runner(argv, input=None):
        from gpuplatform.slurm.cli import Result
        return Result(0, answers[argv[0]])

    cli = SlurmCLI(runner)
    jobs = {j.job_id: j for j in cli.jobs()}
    assert jobs["1"].name == "gpp-7-a0" and jobs["1"].state == "CANCELLED" and jobs["1"].ended
    assert jobs["1"].node_list == ["gpn1", "gpn2"]
    assert jobs["2"].state == "RUNNING" and jobs["2"].gpus == {"gpn1": [0, 1]} and not jobs["2"].ended
    running = {j.job_id: j for j in SlurmCLI(lambda a, i=None: __import__("gpuplatform.slurm.cli", fromlist=["Result"])
                                             .Result(0, recorded("squeue_running_pending.json"))).jobs()}
    assert running["2"].state == "PENDING" and running["2"].reason == "Resources"
    assert running["1"].gpus == {"gpn1": [0], "gpn2": [0]}
    nodes = {n.name: n for n in cli.nodes()}
    assert nodes["gpn2"].drained and nodes["gpn2"].reason == "bad dimm" and not nodes["gpn1"].drained
    assert nodes["gpn1"].gpus == 2 and nodes["gpn1"].cpus == 4 and nodes["gpn1"].address == "127.0.0.1"


def test_cli_names_the_failing_command():
    fake = FakeSlurm()
    fake.fail["sbatch"] = "sbatch: error: Batch job submission failed: Invalid node name specified"
    with pytest.raises(SlurmError, match="sbatch --parsable failed .*Invalid node name"):
        SlurmCLI(fake).submit("#!/bin/bash\n")
    assert json.loads(fake(["squeue", "--json"]).stdout)["jobs"] == []


def test_cli_folds_a_heterogeneous_jobs_components_into_one_job():
    """Recorded from Slurm 22.05 (tests/slurm/recorded/README.md): het job 5 = components 5 (gpn2, 1 GPU) and
    6 (gpn1, 2 GPUs), running, then cancelled through its leader."""
    def cli(name):
        from gpuplatform.slurm.cli import Result
        return SlurmCLI(lambda argv, input=None: Result(0, recorded(name)))

    jobs = {j.job_id: j for j in cli("squeue_het_running.json").jobs()}
    assert sorted(jobs) == ["1", "3", "5"]  # one job per het job, under its leader's id
    het = jobs["5"]
    assert het.state == "RUNNING" and not het.ended and het.name == "gpp-9-a0"
    assert het.node_list == ["gpn2", "gpn1"]  # component order
    assert het.gpus == {"gpn2": [0], "gpn1": [0, 1]}
    assert [(c.job_id, c.het_job_offset, c.node_list) for c in het.components] == \
        [("5", 0, ["gpn2"]), ("6", 1, ["gpn1"])]
    assert jobs["3"].state == "FAILED" and jobs["3"].ended
    after = {j.job_id: j for j in cli("squeue_het_after_cancel.json").jobs()}
    assert after["5"].state == "CANCELLED" and after["5"].ended and after["5"].gpus == {}
    comp = parse_jobcomp(recorded("jobcomp_het.txt"))
    assert list(comp) == ["5"] and comp["5"]["JobState"] == "CANCELLED" and comp["5"]["NodeList"] == "gpn2,gpn1"
    # the most telling state: a component running keeps the job running; a lost node says why it ended
    assert combined_state(["COMPLETED", "RUNNING"]) == "RUNNING"
    assert combined_state(["CANCELLED", "NODE_FAIL"]) == "NODE_FAIL"
    assert combined_state(["COMPLETED", "FAILED"]) == "FAILED"
    assert combined_state(["COMPLETED", "COMPLETED"]) == "COMPLETED"
