"""Failure diagnosis and fast recovery with real node agents on loopback (docs/diagnosis.md), in the world of
test_agents.py: two agents x 4 GPUs, the live server applying their reports, a Celery worker running cycles
and failure detection. The tasks print what real failures print (formats from PyTorch, NCCL and the NVIDIA
driver) and exit as those failures exit."""
from __future__ import annotations

import sys

import pytest

from gpuplatform import services
from gpuplatform.models import Attempt, Event, Job, Node
from tests.integration.test_agents import GPUS_PER_NODE, fast_worker, job_processes, until, world  # noqa: F401

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of "
            "79.10 GiB of which 2.19 GiB is free. Including non-PyTorch memory, this process has 76.90 GiB memory in "
            "use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but "
            "unallocated.")
OOM_TRACEBACK = f"""Traceback (most recent call last):
  File "/srv/train.py", line 88, in <module>
    loss = model(batch).loss
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1553, in _call_impl
    return forward_call(*args, **kwargs)
{OOM_LINE}
"""
WATCHDOG = ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for "
            "600087 milliseconds before timing out.")
XID79 = "NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def py(body: str) -> list[str]:
    return [sys.executable, "-c", body]


def test_a_real_oom_traceback_is_diagnosed_cuda_oom_with_the_decisive_line(world):
    job_id = world.submit("oom", py(f"import sys; print('step 1', flush=True); sys.stderr.write({OOM_TRACEBACK!r}); "
                                    "sys.exit(1)"), gpus=GPUS_PER_NODE)
    until(world.state(job_id, "failed"), 60, "the job to fail")
    job = world.job(job_id)
    d = job["diagnosis"]
    assert d["category"] == "cuda_oom" and d["task"] == "worker[0]", d
    assert d["evidence"][0]["text"] == OOM_LINE and d["evidence"][0]["source"] == "log"
    assert [a["number"] for a in job["attempts"]] == [0] and job["attempts"][0]["exit_code"] == 1
    # the evidence line is where the log API says it is
    text = world.log(job_id, "worker-0")
    assert text.encode()[d["evidence"][0]["offset"]:].decode().startswith(OOM_LINE)


def test_one_rank_oom_others_nccl_timeout_is_cuda_oom_on_that_rank(world):
    script = f"""
import os, signal, sys, time
if os.environ["RANK"] == "1":
    time.sleep(1)
    sys.stderr.write({OOM_TRACEBACK!r}); sys.exit(1)
def hung(signum, frame):  # what the watchdog of the surviving rank prints as the gang goes down
    # once, in one write: the agent signals the process group and each descendant, so a second SIGTERM can
    # arrive while the first handler prints (a nested handler then wrote the line into the middle of the other)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.write(1, ({WATCHDOG!r} + "\\n").encode()); os._exit(6)
signal.signal(signal.SIGTERM, hung)
while True:
    time.sleep(0.1)
"""
    job_id = world.submit("gang", py(script), tasks=2, gpus=GPUS_PER_NODE)
    until(world.state(job_id, "failed"), 60, "the gang to fail")
    # on a loaded box the gang can end at its stop deadline before rank 0's agent ships the watchdog's line;
    # the diagnosis reads it when it arrives (diagnosis.attempts.refresh_late_evidence)
    until(lambda: WATCHDOG in world.log(job_id, "worker-0"), 30, "rank 0's last line to be shipped")
    d = world.job(job_id)["diagnosis"]
    assert (d["category"], d["task"]) == ("cuda_oom", "worker[1]"), d
    # kept, as a consequence: the late chunk and the refreshed diagnosis are committed together, so the line
    # is in the evidence once the log API shows it
    lines = [e["text"] for e in d["evidence"]]
    assert WATCHDOG in lines, (lines, world.log(job_id, "worker-0"))
    assert not job_processes(job_id)


def test_user_error_with_max_restarts_2_fails_after_one_attempt(world):
    body = ("import sys; sys.stderr.write('Traceback (most recent call last):\\n  File \"/srv/train.py\", line 2, in "
            "<module>\\n    import flash_attn\\nModuleNotFoundError: No module named \\'flash_attn\\'\\n'); sys.exit(1)")
    job_id = world.submit("typo", py(body), gpus=1, max_restarts=2)
    until(world.state(job_id, "failed"), 60, "the job to fail")
    job = world.job(job_id)
    assert (job["restarts"], job["attempt"], len(job["attempts"])) == (0, 0, 1), job
    assert job["diagnosis"]["category"] == "user_error" and job["diagnosis"]["action"] == "cancel_retries"
    assert "retrying cannot help" in job["end_reason"]


def test_a_gpu_hardware_fault_retries_on_the_other_node_and_succeeds(world):
    script = f"""
import os, sys
if os.environ["GPUPLATFORM_ATTEMPT"] == "0":
    print({XID79!r}, flush=True); sys.exit(1)
print("second attempt ok", flush=True)
"""
    job_id = world.submit("hw", py(script), gpus=GPUS_PER_NODE, max_restarts=1)
    until(world.state(job_id, "succeeded", "failed"), 90, "the job to finish")
    job = world.job(job_id)
    assert job["state"] == "succeeded", job
    first, second = job["attempts"]
    assert first["diagnosis"]["category"] == "gpu_hardware" and first["diagnosis"]["action"] == "exclude_node"
    assert job["excluded_nodes"] == first["nodes"] and second["nodes"] != first["nodes"]
    assert job["tasks"][0]["node"] not in first["nodes"]
    # recovery time of the interruption: fault -> every task of the next attempt running
    assert first["recovery_seconds"] is not None and 0 < first["recovery_seconds"] < 30, first
    assert Event.objects.filter(job_id=job_id, kind="node_excluded").exists()


def test_a_node_that_failed_three_jobs_is_cordoned(world):
    services.cordon_node(Node.objects.get(name="local-1"), reason="keep the jobs on local-0")
    body = "import sys; print('RuntimeError: CUDA error: uncorrectable ECC error encountered', flush=True); sys.exit(1)"
    for i in range(3):
        job_id = world.submit(f"victim-{i}", py(body), gpus=GPUS_PER_NODE)
        until(world.state(job_id, "failed"), 60, f"victim {i} to fail")
        assert Attempt.objects.get(job_id=job_id).diagnosis["node"] == "local-0"
    node = Node.objects.get(name="local-0")
    assert node.state == "cordoned" and "repeat offender" in node.health_reason
    assert Event.objects.filter(node=node, kind="cordoned").get().data["rule"] == "repeat-offender"
    assert Job.objects.get(pk=job_id).state == "failed"
