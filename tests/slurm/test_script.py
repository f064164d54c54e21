"""The Slurm batch job one gang becomes (gpuplatform/slurm/script.py) and the CLI's reading of real Slurm
output (gpuplatform/slurm/cli.py, tests/slurm/recorded/). No Slurm needed: the launcher is run with bash
under the variables slurmd would give it."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from gpuplatform.slurm.cli import SlurmCLI, SlurmError, expand_hostlist, parse_gres_indices, parse_jobcomp
from gpuplatform.slurm.script import GangTask, ShapeError, build_job, job_name, parse_job_name
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
    assert f"--output={tmp_path}/step-%t.out" in s.batch and "--ntasks=4" in s.batch
    assert (s.nodes, s.tasks_per_node, s.gpus_per_task) == (["gpn2", "gpn1"], 2, 1)


def test_admission_batch_leaves_the_nodes_to_slurm(tmp_path):
    s = build_job(gang(), job_id=7, attempt=0, output_dir=str(tmp_path), partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0, mode="admission")
    opts = sbatch_options(s.batch)
    assert "nodelist" not in opts and "time" not in opts and opts["nodes"] == "2"
    assert 'key="$SLURM_PROCID"' in s.launch


def test_heterogeneous_gangs_are_refused_with_the_reason(tmp_path):
    uneven = gang(nodes=("a",), per_node=2) + gang(nodes=("b",), per_node=1)
    with pytest.raises(ShapeError, match="different numbers of tasks"):
        build_job(uneven, job_id=1, attempt=0, output_dir=str(tmp_path), partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0)
    mixed = gang(nodes=("a",), per_node=1, gpus=1) + gang(nodes=("b",), per_node=1, gpus=2)
    with pytest.raises(ShapeError, match="different GPU counts"):
        build_job(mixed, job_id=1, attempt=0, output_dir=str(tmp_path), partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0)
    with pytest.raises(ValueError, match="mode"):
        build_job(gang(), job_id=1, attempt=0, output_dir=str(tmp_path), partition="p", master_port=1,
                  time_limit_seconds=None, grace_seconds=0, mode="kubernetes")


def test_job_names_round_trip():
    assert parse_job_name(job_name(12, 3)) == (12, 3)
    assert parse_job_name("wrap") is None and parse_job_name("gpp-x-a1") is None and parse_job_name("xgpp-1-a1") is None


def run_launcher(launch: str, tmp_path, **slurm_env) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_NODELIST": "gpn[1-2]", "SLURM_NTASKS": "4",
           "CUDA_VISIBLE_DEVICES": "0,1", **slurm_env}
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    return subprocess.run(["/bin/bash", str(path)], env=env, capture_output=True, text=True, timeout=30)


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
    assert r.returncode == 97 and "no platform task for gpn9/0" in r.stderr


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
