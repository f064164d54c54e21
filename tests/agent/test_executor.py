"""ProcessExecutor and supervise.py with real processes (no mocks): start, exit codes, stop with SIGTERM then
SIGKILL, process trees that escape with setsid, restarts of the agent, incremental logs, containers' argv."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuplatform.agent.executor import (ExecutorError, ProcessExecutor, trim_utf8_tail, container_argv,
                                        container_name, task_env)
from gpuplatform.agent.inventory import demo_copies, read_nvidia_smi_xml
from tests.agent.proc_helpers import (assignment, gone, live_in_group_or_session, read_int, wait_ended,
                                      wait_for)

REPO = Path(__file__).resolve().parents[2]
XML_PATH = REPO / "data" / "nvidia-h200-node" / "nvidia-smi-q.xml"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")


@pytest.fixture
def ex(tmp_path):
    executor = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.5)
    yield executor
    for key in executor.live_keys():  # never leave a process behind, even when a test fails
        executor.stop(key, time.monotonic())
    executor.poll()


def log_of(ex: ProcessExecutor, key) -> str:
    path = Path(ex.task_dir(key)) / "output.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_env_exit_zero_and_secrets_removed(ex, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "s")
    monkeypatch.setenv("GPUPLATFORM_AGENT_TOKEN", "tok")
    monkeypatch.setenv("KEEP_ME", "kept")
    a = assignment(1, "env; echo cwd=$(pwd)", env={"CUDA_VISIBLE_DEVICES": "GPU-aaa", "USER_VAR": "x y",
                                                   "KEEP_ME": "overlaid"})
    assert ex.start(a) == "started"
    assert wait_ended(ex, [(1, 0)])[(1, 0)] == {"task": 1, "attempt": 0, "exit_code": 0, "signal": None,
                                                "lost": None, "cause": None}
    out = log_of(ex, (1, 0))
    assert "CUDA_VISIBLE_DEVICES=GPU-aaa" in out and "USER_VAR=x y" in out and "KEEP_ME=overlaid" in out
    assert "DATABASE_URL" not in out and "DJANGO_SECRET_KEY" not in out and "GPUPLATFORM_AGENT_TOKEN" not in out
    assert f"cwd={ex.task_dir((1, 0))}" in out  # working_dir "" = the task's own directory
    status = json.loads((Path(ex.task_dir((1, 0))) / "exit.json").read_text())
    assert isinstance(status.pop("ended_at"), float) and status == {"exit_code": 0}  # ended_at: session 27


def test_task_env_strips_secrets():
    base = {"PATH": "/bin", "DJANGO_X": "1", "GPUCTL_TOKEN": "t", "GPUPLATFORM_AGENT_TOKEN": "t",
            "DATABASE_URL": "d", "REDIS_URL": "r", "SECRET_KEY": "k", "GPUPLATFORM_JOB_ID": "keep"}
    assert task_env({"A": 1}, base) == {"PATH": "/bin", "GPUPLATFORM_JOB_ID": "keep", "A": "1"}


def test_exit_code_reported_once_then_events_acknowledged(ex):
    assert ex.start(assignment(2, "echo bye; exit 3")) == "started"
    pid = ex.meta((2, 0))["pid"]
    assert wait_ended(ex, [(2, 0)])[(2, 0)]["exit_code"] == 3
    assert ex.poll() == []  # reported by poll() once
    events = ex.unreported()
    assert isinstance(events[1].pop("time"), float)  # when it ended (session 27: test_s27_task_end_time)
    assert events == [{"task": 2, "attempt": 0, "event": "started", "pid": pid},
                      {"task": 2, "attempt": 0, "event": "exited", "exit_code": 3, "signal": None}]
    ex.mark_reported((2, 0), "started")
    ex.mark_reported((2, 0), "exited")
    assert ex.unreported() == []


def test_relative_working_dir_and_missing_command(ex):
    os.makedirs(os.path.join(ex.work_dir, "shared"))
    a = assignment(3, "pwd", working_dir="shared")
    assert ex.start(a) == "started"
    b = dict(assignment(4, ""), argv=["/no/such/program", "x"])
    assert ex.start(b) == "started"
    got = wait_ended(ex, [(3, 0), (4, 0)])
    assert got[(3, 0)]["exit_code"] == 0 and log_of(ex, (3, 0)).strip() == os.path.join(ex.work_dir, "shared")
    assert got[(4, 0)]["exit_code"] == 127
    assert "[gpuplatform] cannot start '/no/such/program': No such file or directory" in log_of(ex, (4, 0))


def test_stop_sigterm_trapped_then_gone(ex):
    script = "trap 'echo stopped > term.txt; exit 0' TERM; echo ready > ready.txt; while :; do sleep 0.05; done"
    assert ex.start(assignment(5, script)) == "started"
    tdir = Path(ex.task_dir((5, 0)))
    wait_for(lambda: (tdir / "ready.txt").exists())
    pids = ex.alive_pids((5, 0))
    assert len(pids) >= 2  # the supervisor and the shell (and maybe its sleep)
    t0 = time.monotonic()
    assert ex.stop((5, 0), time.monotonic() + 5)
    assert ex.stop((5, 0), time.monotonic() + 60)  # idempotent: the earlier deadline is kept
    assert ex.meta((5, 0))["stop"]["deadline"] < t0 + 6
    rec = wait_ended(ex, [(5, 0)])[(5, 0)]
    assert time.monotonic() - t0 < 3  # ended by SIGTERM, long before the deadline
    assert rec["exit_code"] == 0 and (tdir / "term.txt").read_text() == "stopped\n"
    assert ex.alive_pids((5, 0)) == [] and all(gone(p) for p in pids)
    assert ex.stop((5, 0), time.monotonic()) is False  # ended: nothing to stop


def test_sigterm_ignored_gets_sigkill_at_deadline(ex):
    assert ex.start(assignment(6, "trap '' TERM; echo ready > ready.txt; while :; do sleep 0.05; done")) == "started"
    wait_for(lambda: (Path(ex.task_dir((6, 0))) / "ready.txt").exists())
    pids = ex.alive_pids((6, 0))
    t0 = time.monotonic()
    ex.stop((6, 0), t0 + 0.8)
    time.sleep(0.3)
    assert ex.poll() == [] and ex.alive_pids((6, 0))  # SIGTERM ignored: still running before the deadline
    rec = wait_ended(ex, [(6, 0)])[(6, 0)]
    assert 0.8 <= time.monotonic() - t0 < 3
    assert (rec["exit_code"], rec["signal"]) == (None, 9)
    end = ex.unreported()[-1]
    assert isinstance(end.pop("time"), float)
    assert end == {"task": 6, "attempt": 0, "event": "exited", "exit_code": None, "signal": 9}
    assert all(gone(p) for p in pids) and ex.alive_pids((6, 0)) == []


DOUBLE_FORK = ("trap '' TERM; (setsid sh -c 'trap \"\" TERM; echo $$ > grandchild.pid; "
               "while :; do sleep 0.05; done' &); ")


def test_setsid_grandchild_killed_after_stop(ex):
    assert ex.start(assignment(7, DOUBLE_FORK + "while :; do sleep 0.05; done")) == "started"
    gc = read_int(os.path.join(ex.task_dir((7, 0)), "grandchild.pid"))
    sup = ex.meta((7, 0))["pid"]
    assert gc in ex.alive_pids((7, 0))  # found through the ppid chains although it left the group
    ex.stop((7, 0), time.monotonic() + 0.3)
    rec = wait_ended(ex, [(7, 0)])[(7, 0)]
    assert rec["signal"] == 9
    wait_for(lambda: gone(gc), timeout=2)
    assert live_in_group_or_session(gc) == [] and live_in_group_or_session(sup) == []


def test_setsid_grandchild_killed_when_main_process_exits(ex):
    assert ex.start(assignment(8, DOUBLE_FORK + "exit 0")) == "started"
    gc = read_int(os.path.join(ex.task_dir((8, 0)), "grandchild.pid"))
    sup = ex.meta((8, 0))["pid"]
    rec = wait_ended(ex, [(8, 0)], timeout=5)[(8, 0)]  # the supervisor's 0.5 s grace, then SIGKILL
    assert rec["exit_code"] == 0
    assert gone(gc) and live_in_group_or_session(gc) == [] and live_in_group_or_session(sup) == []


def test_never_started_twice(ex, tmp_path):
    a = assignment(9, "echo once >> count.txt")
    assert ex.start(a) == "started"
    assert ex.start(a) == "exists"
    wait_ended(ex, [(9, 0)])
    assert ex.start(a) == "exists"
    again = ProcessExecutor(ex.work_dir)  # a restarted agent, with or without recover()
    assert again.start(a) == "exists"
    again.recover()
    assert again.start(a) == "exists"
    time.sleep(0.1)
    assert (Path(ex.task_dir((9, 0))) / "count.txt").read_text() == "once\n"
    assert ex.start(dict(a, attempt=1)) == "started"  # a new attempt is a new process
    wait_ended(ex, [(9, 1)])


AGENT_SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {platform!r})
    from gpuplatform.agent.executor import ProcessExecutor
    ex = ProcessExecutor({work!r}, supervisor_grace=0.5)
    for a in json.loads(sys.argv[1]):
        assert ex.start(a) == "started"
    os._exit(0)  # the agent dies; its supervisors live on
""")


def first_agent(work_dir: str, assignments: list[dict]) -> None:
    """Run a throwaway agent process that starts `assignments` and exits at once."""
    code = AGENT_SCRIPT.format(platform=str(REPO / "platform"), work=work_dir)
    subprocess.run([sys.executable, "-c", code, json.dumps(assignments)], check=True, timeout=30)


def test_restart_adopts_live_task_and_reports_finished_and_lost(tmp_path):
    work = str(tmp_path / "agent")
    first_agent(work, [assignment(10, "echo up > up.txt; while [ ! -f go ]; do sleep 0.05; done; exit 4"),
                       assignment(11, "sleep 0.2; exit 7", gpus=[{"index": 1, "uuid": "GPU-b"}]),
                       assignment(12, "echo up > up.txt; sleep 30", gpus=[{"index": 2, "uuid": "GPU-c"}])])
    old = ProcessExecutor(work)
    wait_for(lambda: os.path.exists(os.path.join(old.task_dir((11, 0)), "exit.json")))
    wait_for(lambda: os.path.exists(os.path.join(old.task_dir((12, 0)), "up.txt")))
    meta12 = json.loads(Path(old.task_dir((12, 0)), "meta.json").read_text())
    os.kill(meta12["pid"], signal.SIGKILL)  # a supervisor that dies without exit status: "lost"
    wait_for(lambda: gone(meta12["pid"]))
    ex = ProcessExecutor(work, supervisor_grace=0.5)
    try:
        ended = {(r["task"], r["attempt"]): r for r in ex.recover()}
        assert ended[(11, 0)]["exit_code"] == 7
        assert ended[(12, 0)]["lost"] == "agent restarted; process gone, no exit status"
        wait_for(lambda: live_in_group_or_session(meta12["pid"]) == [], timeout=2)  # its `sleep 30` was killed
        assert ex.live_keys() == [(10, 0)] and (10, 0) not in ended
        sup = ex.meta((10, 0))["pid"]
        assert ex.start(assignment(10, "echo again")) == "exists"
        events = ex.unreported()
        assert {(e["task"], e["event"]) for e in events} == {(10, "started"), (11, "started"), (11, "exited"),
                                                             (12, "started"), (12, "lost")}
        Path(ex.task_dir((10, 0)), "go").touch()
        assert wait_ended(ex, [(10, 0)])[(10, 0)]["exit_code"] == 4  # the adopted task's real exit code
        assert gone(sup) and log_of(ex, (10, 0)) == ""
        assert Path(ex.task_dir((10, 0)), "up.txt").read_text() == "up\n"  # ran once
    finally:
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        ex.poll()


def test_adopted_task_can_be_stopped(tmp_path):
    work = str(tmp_path / "agent")
    first_agent(work, [assignment(13, "trap '' TERM; echo up > up.txt; while :; do sleep 0.05; done")])
    ex = ProcessExecutor(work)
    wait_for(lambda: os.path.exists(os.path.join(ex.task_dir((13, 0)), "up.txt")))
    assert ex.recover() == [] and ex.live_keys() == [(13, 0)]
    pids = ex.alive_pids((13, 0))
    ex.stop((13, 0), time.monotonic() + 0.2)
    rec = wait_ended(ex, [(13, 0)])[(13, 0)]
    assert rec["signal"] == 9 and all(gone(p) for p in pids)


def test_logs_incremental_with_offsets(ex):
    script = "printf 'h\\303\\251llo\\n'; while [ ! -f go ]; do sleep 0.02; done; printf 'world\\n'"
    assert ex.start(assignment(14, script)) == "started"
    key = (14, 0)
    wait_for(lambda: ex.read_logs(key)[1])
    assert ex.read_logs(key) == (0, "héllo\n")
    off, end, text = ex.log_chunk(key)
    assert (off, end) == (0, 7) and ex.pending_logs() == [key]
    ex.ack_logs(key, end)
    assert ex.read_logs(key) == (7, "") and ex.pending_logs() == []
    Path(ex.task_dir(key), "go").touch()
    wait_ended(ex, [key])
    assert ex.read_logs(key) == (7, "world\n")
    assert ex.read_logs(key, max_bytes=3) == (7, "wor")
    ex.ack_logs(key, 10)
    assert ex.read_logs(key) == (10, "ld\n")


def test_log_chunks_never_split_a_character(ex):
    assert ex.start(assignment(15, "printf 'a\\303\\251b'")) == "started"
    wait_ended(ex, [(15, 0)])
    assert ex.log_chunk((15, 0), max_bytes=2) == (0, 1, "a")  # "é" is 2 bytes: held for the next chunk
    ex.ack_logs((15, 0), 1)
    assert ex.log_chunk((15, 0), max_bytes=2) == (1, 3, "é")
    assert trim_utf8_tail(b"x\xe2\x82") == b"x" and trim_utf8_tail(b"x\xe2\x82\xac") == b"x\xe2\x82\xac"


def test_done_task_leaves_memory_but_keeps_its_state(ex):
    assert ex.start(assignment(16, "echo hi")) == "started"
    wait_ended(ex, [(16, 0)])
    for e in ex.unreported():
        ex.mark_reported((e["task"], e["attempt"]), e["event"])
    assert ex.meta((16, 0)) is not None  # its log is not shipped yet
    off, end, _ = ex.log_chunk((16, 0))
    ex.ack_logs((16, 0), end)
    assert ex.meta((16, 0)) is None and ex.start(assignment(16, "echo hi")) == "exists"
    again = ProcessExecutor(ex.work_dir)
    assert again.recover() == [] and again.unreported() == []


def test_waits_for_gpus_of_a_task_being_stopped(ex):
    gpu = [{"index": 0, "uuid": "GPU-shared"}]
    assert ex.start(assignment(17, "trap 'sleep 0.3; exit 0' TERM; echo r > r.txt; while :; do sleep 0.05; done",
                               gpus=gpu)) == "started"
    wait_for(lambda: os.path.exists(os.path.join(ex.task_dir((17, 0)), "r.txt")))
    ex.stop((17, 0), time.monotonic() + 5)
    nxt = assignment(18, "echo next", gpus=[{"index": 0, "uuid": "GPU-shared"}, {"index": 1, "uuid": "GPU-x"}])
    assert ex.start(nxt) == "waiting"
    assert ex.start(assignment(19, "echo other", gpus=[{"index": 1, "uuid": "GPU-y"}])) == "started"
    assert not os.path.exists(os.path.join(ex.task_dir((18, 0)), "meta.json"))
    wait_ended(ex, [(17, 0), (19, 0)])
    assert ex.start(nxt) == "started"
    assert wait_ended(ex, [(18, 0)])[(18, 0)]["exit_code"] == 0


def half(uuid: str = "GPU-h", milli: int = 500, memory: int = 0, total: int = 1000) -> list[dict]:
    return [{"index": 0, "uuid": uuid, "share_milli": milli, "share_memory_mib": memory, "memory_mib": total}]


def test_fractions_of_one_gpu_run_together_within_its_share_and_memory(ex):
    # two 0.5 tasks of one gang on one GPU: each waits for the other's file, so both must run at once
    meet = "touch here.$GPUPLATFORM_TASK_INDEX; while [ ! -e ../{other}/here.{oi} ]; do sleep 0.02; done; echo met"
    a = assignment(30, meet.format(other="31-0", oi=1), env={"GPUPLATFORM_TASK_INDEX": "0"}, gpus=half())
    b = assignment(31, meet.format(other="30-0", oi=0), env={"GPUPLATFORM_TASK_INDEX": "1"}, gpus=half())
    assert (ex.start(a), ex.start(b)) == ("started", "started")
    assert ex.start(assignment(32, "echo third", gpus=half(milli=100))) == "waiting"  # 1.1 GPU: over
    assert ex.start(assignment(33, "echo whole", gpus=[{"index": 0, "uuid": "GPU-h"}])) == "waiting"
    ended = wait_ended(ex, [(30, 0), (31, 0)])
    assert ended[(30, 0)]["exit_code"] == ended[(31, 0)]["exit_code"] == 0
    assert "met" in log_of(ex, (30, 0)) and "met" in log_of(ex, (31, 0))


def test_fraction_waits_when_memory_is_full_or_the_gpu_is_held_whole(ex):
    loop = "echo r > r.txt; while :; do sleep 0.05; done"
    assert ex.start(assignment(34, loop, gpus=half(milli=300, memory=700))) == "started"
    assert ex.start(assignment(35, "echo m", gpus=half(milli=300, memory=400))) == "waiting"  # 1100 MiB > 1000
    assert ex.start(assignment(36, "echo m", gpus=half(milli=300, memory=300))) == "started"
    assert ex.start(assignment(37, loop, gpus=[{"index": 0, "uuid": "GPU-w"}])) == "started"
    assert ex.start(assignment(38, "echo f", gpus=half(uuid="GPU-w"))) == "waiting"  # held whole
    # a leftover fraction of an earlier attempt (no share fields: an old meta.json) counts as whole
    ex._meta[(34, 0)]["gpus"] = [{"index": 0, "uuid": "GPU-h"}]
    assert ex.start(assignment(39, "echo f", gpus=half(milli=100, memory=0))) == "waiting"


def test_image_without_runtime_ends_with_125(ex):
    assert ex.start(assignment(20, "echo hi", image="nvcr.io/nvidia/pytorch:25.01-py3")) == "ended"
    assert "no container runtime" in log_of(ex, (20, 0))
    events = ex.unreported()
    assert len(events) == 1 and isinstance(events[0].pop("time"), float)
    assert events == [{"task": 20, "attempt": 0, "event": "exited", "exit_code": 125, "signal": None}]
    assert ex.poll() == [] and ex.live_keys() == [] and ex.start(assignment(20, "x")) == "exists"


def test_container_argv_docker_and_podman():
    gpus = [{"index": 0, "uuid": "GPU-a"}, {"index": 3, "uuid": "GPU-b"}]
    argv = container_argv("docker", task=5, attempt=1, image="img:1", argv=["python", "t.py"],
                          env_names=["RANK", "CUDA_VISIBLE_DEVICES"], gpus=gpus, workdir="/w")
    assert argv == ["docker", "run", "--rm", "--name", "gpuplatform-5-1", "--network", "host",
                    "--gpus", '"device=GPU-a,GPU-b"', "-e", "RANK", "-e", "CUDA_VISIBLE_DEVICES", "-w", "/w",
                    "img:1", "python", "t.py"]
    argv = container_argv("podman", task=5, attempt=1, image="img:1", argv=["true"], env_names=[], gpus=gpus)
    assert argv == ["podman", "run", "--rm", "--name", "gpuplatform-5-1", "--network", "host",
                    "--device", "nvidia.com/gpu=GPU-a", "--device", "nvidia.com/gpu=GPU-b", "img:1", "true"]
    assert "--gpus" not in container_argv("docker", task=1, attempt=0, image="i", argv=["x"], env_names=[], gpus=[])
    assert container_name(5, 1) == "gpuplatform-5-1"
    with pytest.raises(ExecutorError):
        container_argv("lxc", task=1, attempt=0, image="i", argv=["x"], env_names=[], gpus=[])
    with pytest.raises(ExecutorError):
        ProcessExecutor("/tmp/unused-executor-dir", runtime="lxc")


FAKE_DOCKER = """#!/bin/sh
# a stand-in for the docker CLI: records its arguments and the values of the -e variables
if [ "$1" = kill ]; then echo "kill $2" >> "$FAKE_DOCKER_LOG"; exit 0; fi
printf '%s\\n' "$*"
echo "RANK=$RANK SECRET_KEY=${SECRET_KEY:-unset}"
trap '' TERM
while :; do sleep 0.05; done
"""


def test_container_path_with_a_fake_runtime(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    kills = tmp_path / "kills.txt"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(kills))
    monkeypatch.setenv("SECRET_KEY", "must-not-leak")
    ex = ProcessExecutor(str(tmp_path / "agent"), runtime="docker")
    a = assignment(21, "", image="img:2", env={"RANK": "3"}, gpus=[{"index": 0, "uuid": "GPU-z"}])
    a["argv"] = ["python", "train.py"]
    try:
        assert ex.start(a) == "started"
        wait_for(lambda: "RANK=3" in log_of(ex, (21, 0)))
        first = log_of(ex, (21, 0)).splitlines()[0]
        assert first == ('run --rm --name gpuplatform-21-0 --network host --gpus "device=GPU-z" -e RANK img:2 '
                         'python train.py')
        assert "SECRET_KEY=unset" in log_of(ex, (21, 0))
        ex.stop((21, 0), time.monotonic() + 0.2)
        assert wait_ended(ex, [(21, 0)])[(21, 0)]["signal"] == 9
        assert kills.read_text() == "kill gpuplatform-21-0\n"
    finally:
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        ex.poll()


def test_demo_copies_of_the_h200():
    gpus = read_nvidia_smi_xml(XML_PATH.read_text())
    copies = demo_copies(gpus, 4, "demo-node")
    assert [g.index for g in copies] == [0, 1, 2, 3]
    assert len({g.uuid for g in copies}) == 4 and all(g.uuid.startswith("GPU-") for g in copies)
    assert len({g.pci_bus_id for g in copies}) == 4
    assert all(g.model == gpus[0].model and g.memory_mib == gpus[0].memory_mib for g in copies)
    assert [g.uuid for g in demo_copies(gpus, 4, "demo-node")] == [g.uuid for g in copies]  # deterministic
    assert demo_copies(gpus, 1, "other-node")[0].uuid != copies[0].uuid


def test_work_dir_lock_keeps_a_second_agent_out(tmp_path):
    work = str(tmp_path / "agent")
    code = ("import sys, time; sys.path.insert(0, %r); from gpuplatform.agent.executor import ProcessExecutor; "
            "ex = ProcessExecutor(%r); ex.lock(); print('locked', flush=True); time.sleep(30)"
            ) % (str(REPO / "platform"), work)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        with pytest.raises(ExecutorError, match="another agent"):
            ProcessExecutor(work).lock()
    finally:
        holder.kill()
        holder.wait()
    ex = ProcessExecutor(work)
    ex.lock()
    ex.lock()  # idempotent in the holder


def test_sigkill_end_and_the_supervisors_oom_evidence(ex):
    """trial 13, F1: a task's own `kill -9` ends with signal 9 and no OOM claim in its log (no OOM kill counted on
    this host meanwhile); when an oom_kill counter grew while the task ran, the supervisor's line says so and the
    shipped diagnosis rules read that line as host_oom (a SIGKILL alone is `unknown`)."""
    from gpuplatform.agent import supervise
    from gpuplatform.diagnosis import engine
    from gpuplatform.diagnosis.tables import shipped_rules

    before = supervise._oom_counters()
    assert ex.start(assignment(5, 'echo "user script stops itself"; kill -9 $$')) == "started"
    assert wait_ended(ex, [(5, 0)])[(5, 0)]["signal"] == 9
    if supervise._oom_counters() == before:  # nothing was OOM-killed on this host while it ran
        assert "OOM" not in log_of(ex, (5, 0))
    assert before.get("/proc/vmstat", 0) >= 0  # read where the kernel has it (Linux >= 4.13)
    assert supervise._oom_line({"/proc/vmstat": 3}, {"/proc/vmstat": 3}) is None
    assert supervise._oom_line({}, {"/proc/vmstat": 3}) is None  # not read at the start: no claim
    cg = "/sys/fs/cgroup/agent/memory.events"
    line = supervise._oom_line({cg: 0, "/proc/vmstat": 5}, {cg: 1, "/proc/vmstat": 7})
    assert line == ("the kernel's OOM killer killed 1 process in the task's cgroup while the task ran "
                    f"({cg} oom_kill 0 -> 1)")  # the task's own cgroup before the host's count
    host = supervise._oom_line({"/proc/vmstat": 5}, {"/proc/vmstat": 7})
    assert "killed 2 processes on this host" in host
    rules = engine.parse_rules(shipped_rules())
    for text in (line, host):
        d = engine.diagnose([engine.TaskEvidence("worker[0]", "n0", 1.0, signal=9,
                                                 log=f"user script stops itself\n[gpuplatform] {text}\n")], rules=rules)
        assert (d.category, d.rule) == ("host_oom", "agent-oom-kill-counter"), d
    d = engine.diagnose([engine.TaskEvidence("worker[0]", "n0", 1.0, signal=9, log=log_of(ex, (5, 0)))], rules=rules)
    assert d.category == ("host_oom" if "OOM killer killed" in log_of(ex, (5, 0)) else "unknown")


def test_the_kernels_oom_line_for_the_tasks_pid_is_the_supervisors_first_evidence(tmp_path):
    """Where /dev/kmsg is readable the supervisor looks for the kernel's own line naming its child's pid; only that
    pid's line counts (another process's OOM kill is not this task's)."""
    from gpuplatform.agent import supervise
    from gpuplatform.diagnosis import engine
    from gpuplatform.diagnosis.tables import shipped_rules

    records = ["Linux version 6.1", "Out of memory: Killed process 999 (other) total-vm:1kB",
               "Memory cgroup out of memory: Killed process 4242 (python) total-vm:9876kB, anon-rss:5432kB",
               "oom_reaper: reaped process 4242 (python)"]
    assert supervise._kernel_oom_line(4242, records) == records[2]
    assert supervise._kernel_oom_line(42, records) is None and supervise._kernel_oom_line(4242, []) is None
    line = f"[gpuplatform] kernel log: {records[2]}"
    d = engine.diagnose([engine.TaskEvidence("worker[0]", "n0", 1.0, signal=9, log=line)],
                        rules=engine.parse_rules(shipped_rules()))
    assert (d.category, d.rule, d.evidence[0]["text"]) == ("host_oom", "kernel-oom-killer", line)
    # a file that is not there (or not readable) gives no records; a readable one gives each record's message
    assert list(supervise._kmsg_records(str(tmp_path / "absent"))) == []
    fake = tmp_path / "kmsg"
    fake.write_text("6,1,5,-;Out of memory: Killed process 7 (x)\n")
    assert list(supervise._kmsg_records(str(fake))) == ["Out of memory: Killed process 7 (x)"]


TERM_COUNTER = textwrap.dedent("""
    import signal, sys, time
    n = 0
    def term(*_):
        global n
        n += 1
    signal.signal(signal.SIGTERM, term)
    open(sys.argv[1] + ".ready", "w").close()
    while not n:
        time.sleep(0.02)
    end = time.monotonic() + float(sys.argv[2])  # a checkpoint that long, counting what else comes meanwhile
    while time.monotonic() < end:
        time.sleep(0.02)
    open(sys.argv[1], "w").write(str(n))
""")


def term_counter(ex) -> str:
    """`python <script>` of TERM_COUNTER: `... NAME SECONDS` writes NAME.ready once it runs, and after its first
    SIGTERM waits SECONDS, then writes to NAME the number of SIGTERMs it got."""
    Path(ex.work_dir).mkdir(parents=True, exist_ok=True)
    script = Path(ex.work_dir) / "count_term.py"
    script.write_text(TERM_COUNTER)
    return f"{sys.executable} {script}"


def test_a_stop_signals_each_process_once_in_the_group_and_outside_it(ex):
    """New-user trial 19, F3: every process of the task's group got SIGTERM twice, from the group's killpg and again
    one by one, 10 ms apart: a checkpointing handler ran twice. Each process gets one: the group's members from the
    group signal, a descendant that left the group (setsid) on its own."""
    counter = term_counter(ex)
    # the task's main process is the counter itself (exec), so the supervisor's clean-up of what outlives it does not
    # signal the escaped one (which stops counting first)
    cmd = f"setsid {counter} escaped.txt 0.5 & exec {counter} inside.txt 1.0"
    assert ex.start(assignment(40, cmd)) == "started"
    tdir = Path(ex.task_dir((40, 0)))
    wait_for(lambda: (tdir / "inside.txt.ready").exists() and (tdir / "escaped.txt.ready").exists())
    ex.stop((40, 0), time.monotonic() + 10)
    wait_for(lambda: (tdir / "inside.txt").exists() and (tdir / "escaped.txt").exists())
    assert (tdir / "inside.txt").read_text() == "1"
    assert (tdir / "escaped.txt").read_text() == "1"
    wait_ended(ex, [(40, 0)])


def test_a_stopped_task_whose_shell_dies_leaves_its_child_the_stops_grace(ex):
    """Trial 19 (F3's kin): `sh -c "python train.py; ..."` under a stop: sh died at once on the SIGTERM, and the
    supervisor's clean-up of what outlived it sent the checkpointing python a second SIGTERM and a SIGKILL 0.5 s
    (its own grace) later. During a stop what is left keeps the stop's grace, with no second signal."""
    # a checkpoint of 1.5 s, longer than the supervisor's own grace (0.5 s here)
    assert ex.start(assignment(41, f"{term_counter(ex)} saved.txt 1.5; echo after")) == "started"
    tdir = Path(ex.task_dir((41, 0)))
    wait_for(lambda: (tdir / "saved.txt.ready").exists())
    ex.stop((41, 0), time.monotonic() + 10)
    rec = wait_ended(ex, [(41, 0)], timeout=8)[(41, 0)]
    assert (tdir / "saved.txt").read_text() == "1"
    assert rec["signal"] == 15  # the shell, killed by the stop's SIGTERM
    assert ex.alive_pids((41, 0)) == []


def test_a_task_that_kills_its_supervisor_leaves_no_process_behind(ex):
    """New-user trial 19, F9: a task that started a setsid daemon and then SIGKILLed its supervisor ended (its GPUs
    released) while the daemon, re-parented to init, ran on. Every process of the task carries its TASK_MARK: the
    task is reported ended only once they are all killed, the daemon included."""
    script = "setsid sleep 3001 & echo $! > daemon.pid; sleep 0.3; kill -9 $PPID; sleep 3002"
    assert ex.start(assignment(42, script)) == "started"
    tdir = Path(ex.task_dir((42, 0)))
    daemon = wait_for(lambda: read_int(tdir / "daemon.pid"))
    rec = wait_ended(ex, [(42, 0)])[(42, 0)]
    # the supervisor's death, not the task's signal: its end is unknown (trial 19b, F9: it read as the task's own
    # SIGKILL, diagnosed with the OOM killer's hint)
    assert rec["signal"] is None and rec["exit_code"] is None
    assert rec["lost"].startswith("the task supervisor was killed by signal 9 (SIGKILL) before it recorded"), rec
    wait_for(lambda: gone(daemon), what="the setsid daemon to be killed")
    assert ex.alive_pids((42, 0)) == []


def test_a_daemon_that_drops_its_mark_and_kills_its_supervisor_is_still_killed(ex):
    """Trial 19b, F1: a setsid daemon that removed (env -u) or changed its GPUPLATFORM_TASK_MARK, then had the task
    kill its supervisor, ran on after the task ended. A process the agent saw in the task's tree at a poll stays the
    task's (while its pid names the same process): killed at the task's end like the rest."""
    script = ("setsid env -u GPUPLATFORM_TASK_MARK sleep 3001 & echo $! > a.pid; "
              "setsid env GPUPLATFORM_TASK_MARK=/tmp/elsewhere sleep 3001 & echo $! > b.pid; "
              "while [ ! -f go ]; do sleep 0.05; done; kill -9 $PPID; sleep 3002")
    assert ex.start(assignment(43, script)) == "started"
    tdir = Path(ex.task_dir((43, 0)))
    a, b = wait_for(lambda: read_int(tdir / "a.pid")), wait_for(lambda: read_int(tdir / "b.pid"))
    wait_for(lambda: gone(a) is False and gone(b) is False)
    assert ex.poll() == []  # a poll sees both in the task's tree
    (tdir / "go").touch()
    rec = wait_ended(ex, [(43, 0)])[(43, 0)]
    assert rec["lost"].startswith("the task supervisor was killed by signal 9 (SIGKILL)"), rec
    wait_for(lambda: gone(a) and gone(b), what="the unmarked daemons to be killed")
    assert ex.alive_pids((43, 0)) == []
