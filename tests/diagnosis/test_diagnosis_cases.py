"""The diagnosis table (gpuplatform/diagnosis/rules.yaml) checked against every ../shared/cases/diagnosis-*.yaml
case, and against variants of each category written from the messages' own sources (NVIDIA's XID catalog,
PyTorch, NCCL, the kernel, CUDA), not copied from the cases. Pure: no database."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplatform.diagnosis import engine
from gpuplatform.diagnosis.tables import shipped_health_rules, shipped_rules

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases"
RULES = engine.parse_rules(shipped_rules())


def case(name: str) -> dict:
    if not CASES.is_dir():  # the shared cases sit beside the checkout (CI's layout), not inside it
        pytest.skip(f"{CASES} is not beside this checkout")
    return yaml.safe_load((CASES / name).read_text())


def one_task(log: str, **kw) -> engine.Diagnosis:
    return engine.diagnose([engine.TaskEvidence("worker[0]", "n0", 100.0, log=log, exit_code=kw.pop("exit_code", 1),
                                                **kw)], rules=RULES)


def check_case(name: str) -> None:
    c = case(name)
    d = one_task(c["log"])
    assert d.category == c["expected_category"], (name, d)
    assert d.evidence[0]["text"] == c["decisive_line"].strip(), d.evidence
    assert d.evidence[0]["source"] == "log" and d.evidence[0]["task"] == "worker[0]"
    line = c["log"].split("\n")[d.evidence[0]["line"] - 1]
    assert line.strip() == c["decisive_line"].strip()  # the line number points at the decisive line
    assert c["log"].encode()[d.evidence[0]["offset"]:].decode().lstrip().startswith(c["decisive_line"][:40])


def test_diagnosis_cuda_oom_case():
    """diagnosis-cuda-oom.yaml: pdsh-prefixed torch.cuda.OutOfMemoryError."""
    check_case("diagnosis-cuda-oom.yaml")


def test_diagnosis_gpu_hardware_case():
    """diagnosis-gpu-hardware.yaml: NVRM Xid 79 decides, not the nvidia-smi line before it nor the
    crash-dump lines after it."""
    check_case("diagnosis-gpu-hardware.yaml")
    assert one_task(case("diagnosis-gpu-hardware.yaml")["log"]).action == "exclude_node"


def test_diagnosis_nan_loss_case():
    """diagnosis-nan-loss.yaml: 'Loss is nan, stopping training' (the SystemExit after it is the stop)."""
    check_case("diagnosis-nan-loss.yaml")


def test_diagnosis_nccl_timeout_case():
    """diagnosis-nccl-timeout.yaml: the first watchdog line, glued to a tqdm progress line."""
    check_case("diagnosis-nccl-timeout.yaml")


def test_diagnosis_user_error_case():
    """diagnosis-user-error.yaml: '[rank5]: ValueError: File ... not found.'; retrying cannot help."""
    check_case("diagnosis-user-error.yaml")
    assert one_task(case("diagnosis-user-error.yaml")["log"]).action == "cancel_retries"


def test_every_case_file_is_covered():
    if not CASES.is_dir():
        pytest.skip(f"{CASES} is not beside this checkout")
    names = sorted(p.name for p in CASES.glob("diagnosis-*.yaml"))
    assert names, CASES
    for name in names:
        check_case(name)


# Variants of each category, written from the messages' sources (the format each emitter prints).
VARIANTS = [
    # PyTorch < 1.13: RuntimeError form of the caching allocator's message, torchrun --tee prefix
    ("cuda_oom", "[default3]:RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 15.78 GiB "
                 "total capacity; 14.21 GiB already allocated; 3.75 MiB free; 14.60 GiB reserved in total by PyTorch)"),
    ("cuda_oom", "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    ("cuda_oom", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                 "4294967296 bytes."),
    ("cuda_oom", "node7:1234:1300 [2] include/alloc.h:99 NCCL WARN Cuda failure 'out of memory'"),
    ("gpu_hardware", "[ 8812.114] NVRM: Xid (PCI:0000:3b:00): 48, pid=2811, name=python, An uncorrectable double "
                     "bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
    ("gpu_hardware", "NVRM: Xid (PCI:0000:b3:00): 74, pid=91, name=python, NVLink: fatal error detected on link 3"),
    ("gpu_hardware", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ("gpu_hardware", "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer"),
    ("cuda_error", "NVRM: Xid (PCI:0000:3b:00): 13, pid=4412, name=python, Graphics SM Warp Exception on (GPC 1, TPC 0)"),
    ("cuda_error", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("cuda_error", "/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: "
                   "[0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
                   "RuntimeError: CUDA error: device-side assert triggered"),
    ("cuda_error", "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, "
                   "opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, "
                   "CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"),
    ("cuda_error", "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"),
    ("nan_loss", "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output."),
    ("nan_loss", "[2024-01-02 10:00:00] [INFO] [loss_scaler.py:183] Current loss scale already at minimum - cannot "
                 "decrease scale anymore. Exiting run."),
    ("nan_loss", "Monitored metric val_loss = nan is not finite. Previous best value was 0.512. Signaling Trainer to "
                 "stop."),
    ("nan_loss", "step 1200 | train loss: inf | lr 3e-4"),
    ("nccl_timeout", "[rank3]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Watchdog caught collective operation "
                     "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                     "for 600001 milliseconds before timing out."),
    ("nccl_timeout", "[rank0]:[E ProcessGroupNCCL.cpp:1224] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck "
                     "for 480 seconds without making progress in monitoring enqueued collectives."),
    ("nccl_network", "node3:77:142 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
                     "10.1.0.4<48123> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.1.0.3"),
    ("nccl_network", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
                     "exited or there was a network error, NCCL version 2.19.3\nncclRemoteError: A call failed "
                     "possibly due to a network error or a remote process exiting prematurely."),
    ("nccl_network", "node1:55:99 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
                     "node2<41011>"),
    ("user_error", "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import flash_attn\n"
                   "ModuleNotFoundError: No module named 'flash_attn'"),
    ("user_error", "[rank0]: KeyError: 'input_ids'"),
    ("user_error", "usage: train.py [-h] [--lr LR]\ntrain.py: error: unrecognized arguments: --learning-rate 3e-4"),
    ("user_error", "/usr/bin/python3: can't open file '/work/trian.py': [Errno 2] No such file or directory"),
    ("user_error", "FileNotFoundError: [Errno 2] No such file or directory: '/data/shards/train-00000.parquet'"),
    ("user_error", "OSError: llama-7b is not a local folder and is not a valid model identifier listed on "
                   "'https://huggingface.co/models'"),
    ("storage", "OSError: [Errno 28] No space left on device: '/ckpt/step_1000/model.pt'"),
    ("storage", "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1719025536 vs 1719025424"),
    ("storage", "OSError: [Errno 116] Stale file handle"),
    ("host_oom", "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
                 "memory (shm)."),
    ("host_oom", "[  612.3] Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:65432100kB"),
]


@pytest.mark.parametrize("category,log", VARIANTS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(VARIANTS)])
def test_variants_from_the_sources(category, log):
    d = one_task(log)
    assert d.category == category, (log, d)
    assert d.evidence[0]["source"] == "log" and d.evidence[0]["text"] in log


def test_a_sigkill_alone_is_not_called_host_oom_and_exit_127_is_user_error():
    """trial 13, F1: a user's own `kill -9` was diagnosed "host out of memory" with action retry, the signal its only
    evidence. A SIGKILL (or exit 137) the platform did not send is `unknown`, its summary saying the OOM killer is
    the usual sender but not confirmed; host_oom needs evidence (the kernel's line, the supervisor's counter line)."""
    for kw in ({"exit_code": None, "signal": 9}, {"exit_code": 137}):
        d = one_task("user script stops itself", **kw)
        assert (d.category, d.action) == ("unknown", "retry"), d
        assert d.rule in ("sigkill-not-from-platform", "exit-137")
        assert "OOM killer" in d.summary and "not confirmed" in d.summary and "host out of memory" not in d.summary
        assert d.evidence == [{"task": "worker[0]", "source": "exit", "line": None,
                               "text": "killed by signal 9" if kw.get("signal") else "exited with code 137"}]
    # with the kernel's OOM line, or the supervisor's oom_kill counter line, in the log: host_oom, that line quoted
    kernel = "[ 812.1] Memory cgroup out of memory: Killed process 4242 (python) total-vm:9876kB"
    agent = ("[gpuplatform] the kernel's OOM killer killed 1 process in the task's cgroup while the task ran "
             "(/sys/fs/cgroup/agent/memory.events oom_kill 0 -> 1)")
    slurm = "host out of memory: Slurm job 812 OUT_OF_MEMORY"  # the Slurm backend's end message (docs/slurm.md)
    for line in (kernel, agent, slurm):
        d = one_task("step 1\n" + line, exit_code=None, signal=9)
        assert (d.category, d.evidence[0]["text"]) == ("host_oom", line), d
    d = one_task("sh: 1: trainn: not found", exit_code=127)
    assert (d.category, d.action) == ("user_error", "cancel_retries")
    # a SIGKILL at the stop deadline (the platform's) is no diagnosis
    assert one_task("", exit_code=None, signal=9, own_end=False).category == "unknown"
    assert one_task("", exit_code=None, signal=9, own_end=False).rule == ""


def test_a_worker_killed_by_sigkill_in_the_log_is_not_host_oom_without_evidence():
    """The same fault in log form: torchrun's 'failed (exitcode: -9)' and the DataLoader's 'killed by signal: Killed'
    are a SIGKILL of a child: `unknown` quoting the line, unless an OOM line is there too; a known cause wins."""
    for line in ("RuntimeError: DataLoader worker (pid 20873) is killed by signal: Killed.",
                 "torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 14) of binary"):
        d = one_task("epoch 1\n" + line, exit_code=1)
        assert (d.category, d.evidence[0]["text"]) == ("unknown", line), d
        assert "not confirmed" in d.summary and d.rule in ("torch-dataloader-killed", "torchelastic-sigkill")
        oom = "[ 9.0] Out of memory: Killed process 20873 (pt_data_worker) total-vm:1kB"
        assert one_task(line + "\n" + oom, exit_code=1).category == "host_oom"
        assert one_task(line + "\nsh: 1: x: not found", exit_code=127).category == "user_error"


def test_an_admins_unknown_rule_is_ordered_not_a_crash():
    """`unknown` is a category a rule may name; it had no place in PRECEDENCE, so sorting its match raised."""
    rules = engine.parse_rules(shipped_rules(), [{"id": "mine", "category": "unknown", "pattern": "watchdog fired",
                                                  "source": "our watchdog"}])
    d = engine.diagnose([engine.TaskEvidence("worker[0]", "n0", 1.0, exit_code=3, log="watchdog fired")], rules=rules)
    assert (d.category, d.rule) == ("unknown", "mine")


def test_root_cause_over_symptom_first_task_to_end():
    """Rank 3 runs out of memory; ranks 0-2 then hit the NCCL watchdog: cuda_oom on worker[3]."""
    watchdog = ("[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, Timeout(ms)=60000) ran for 60032 milliseconds before timing out.")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB"
    tasks = [engine.TaskEvidence(f"worker[{r}]", f"n{r}", 160.0 + r, signal=6, log=watchdog.format(r=r)) for r in range(3)]
    tasks.append(engine.TaskEvidence("worker[3]", "n3", 100.0, exit_code=1, log="step 10\n" + oom))
    d = engine.diagnose(tasks, rules=RULES)
    assert (d.category, d.task, d.node) == ("cuda_oom", "worker[3]", "n3")
    assert d.evidence[0]["text"] == oom and d.evidence[0]["line"] == 2
    # the consequences are kept as evidence too, after the decisive line
    assert any("Watchdog" in e["text"] for e in d.evidence[1:])
    # order of arrival does not matter: the timed-out ranks first in the list, rank 3 still decides
    d2 = engine.diagnose(list(reversed(tasks)), rules=RULES)
    assert (d2.category, d2.task) == ("cuda_oom", "worker[3]")


def test_a_root_cause_beats_a_consequence_even_when_it_ends_later():
    """A rank hung in NCCL ends first (its watchdog fired); the one with the real error ends later."""
    tasks = [engine.TaskEvidence("worker[0]", "a", 10.0, log="Watchdog caught collective operation timeout: "
                                 "WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out."),
             engine.TaskEvidence("worker[1]", "b", 20.0, log="OSError: [Errno 28] No space left on device")]
    assert engine.diagnose(tasks, rules=RULES).category == "storage"


def test_hardware_health_event_beats_the_log():
    """The node's health events before the end name the cause: the ranks' CUDA errors are consequences."""
    tasks = [engine.TaskEvidence("worker[0]", "n1", 10.0, log="RuntimeError: CUDA error: unspecified launch failure")]
    health = [engine.HealthEvidence("n1", "n1: gpu2 xid=[79]: rule xid-fatal -> fail_tasks", 9.0, rule="xid-fatal")]
    d = engine.diagnose(tasks, rules=RULES, health=health)
    assert (d.category, d.action, d.node) == ("gpu_hardware", "exclude_node", "n1")
    assert d.evidence[0]["source"] == "health"


def test_platform_causes_come_from_the_platform():
    tasks = [engine.TaskEvidence("worker[0]", "n1", 10.0, signal=15, own_end=False, log="got TERM")]
    # the action is what the lifecycle does next: cancelled and time-limited jobs end, the others requeue
    expected = {"cancelled": "cancel_retries", "preempted": "retry", "time_limit": "cancel_retries",
                "gang_start_timeout": "retry"}
    for cause, action in expected.items():
        d = engine.diagnose(tasks, rules=RULES, platform={"cause": cause, "text": "x"})
        # a time limit is the user's own (new-user trial 22, F7): user_error, still from the platform's event
        assert d.category == {"time_limit": "user_error", "cancelled": "cancelled"}.get(cause, "platform")
        assert d.evidence[0]["source"] == "event"
        assert (d.action, d.rule) == (action, f"platform:{cause}"), cause
    assert engine.diagnose(tasks, rules=RULES, platform={"cause": "node_lost", "text": "n1"}).category == "platform"


def test_a_platform_text_that_names_its_cause_is_not_prefixed_twice():
    """New-user report item 13: the summary read "time limit: time limit: ran 3 s, ...". The cause is
    prefixed only to a text that does not start with it."""
    tasks = [engine.TaskEvidence("worker[0]", "n1", 10.0, signal=15, own_end=False, log="")]
    d = engine.diagnose(tasks, rules=RULES, platform={"cause": "time_limit",
                                                      "text": "time limit of 3 s reached (time_limit_seconds)"})
    assert d.summary == "time limit of 3 s reached (time_limit_seconds)"
    d = engine.diagnose(tasks, rules=RULES, platform={"cause": "node_lost",  # newuser2 item 9
                                                      "text": "node lost: 1 task(s) failed on n1"})
    assert d.summary == "node lost: 1 task(s) failed on n1"
    assert engine.diagnose(tasks, rules=RULES, platform={"cause": "node_lost", "text": "n1"}).summary == "node lost: n1"
    assert engine.diagnose(tasks, rules=RULES, platform={"cause": "preempted", "text": "by job 7"}).summary == \
        "preempted: by job 7"


def test_every_shipped_rule_cites_its_source_and_the_table_is_versioned():
    table = shipped_rules()
    assert table["version"]
    categories = {r["category"] for r in table["rules"]}
    assert categories == set(engine.CATEGORIES) - set(engine.PLATFORM_ONLY_CATEGORIES)  # unknown: what is known without a cause (a SIGKILL)
    assert all(len(r["source"]) > 20 for r in table["rules"])
    version, health = engine.parse_health_rules(shipped_health_rules())
    assert version and all(len(r.source) > 20 for r in health)


@pytest.mark.parametrize("entry,field", [
    ({"id": "x", "category": "oom", "pattern": "a", "source": "s"}, "extra[0].category"),
    ({"id": "x", "category": "cuda_oom", "pattern": "(", "source": "s"}, "extra[0].pattern"),
    ({"id": "x", "category": "cuda_oom", "pattern": "a", "source": ""}, "extra[0].source"),
    ({"id": "x", "category": "cuda_oom", "pattern": "a", "source": "s", "action": "reboot"}, "extra[0].action"),
    ({"id": "x", "category": "cuda_oom", "source": "s"}, "extra[0]"),
    ({"id": "x", "category": "cuda_oom", "when": {"rc": 1}, "source": "s"}, "extra[0].when"),
    ({"id": "torch-cuda-oom", "category": "cuda_oom", "pattern": "a", "source": "s"}, "extra[0].id"),
])
def test_bad_rules_are_refused_naming_the_field(entry, field):
    with pytest.raises(engine.RuleError) as err:
        engine.parse_rules(shipped_rules(), [entry])
    assert err.value.field == field


def test_an_extra_rule_extends_the_table():
    rules = engine.parse_rules(shipped_rules(), [{"id": "admin:disk", "category": "storage", "source": "our NAS",
                                                  "pattern": r"lustre: .* evicted"}])
    d = engine.diagnose([engine.TaskEvidence("w[0]", "n", 1.0, log="lustre: client 7 evicted")], rules=rules)
    assert (d.category, d.rule) == ("storage", "admin:disk")


def test_health_rules_judge_signals():
    _, rules = engine.parse_health_rules(shipped_health_rules())
    act = lambda s: engine.strongest(r.action for r in engine.evaluate_health(s, rules))  # noqa: E731
    assert act({"xid": [79]}) == "fail_tasks"
    assert act({"xid": [13]}) == "record"
    assert act({"xid": [13, 48]}) == "fail_tasks"
    assert act({"ecc_dbe_volatile": 0}) is None
    assert act({"ecc_dbe_volatile": 2}) == "fail_tasks"
    assert act({"row_remap_failure": True}) == "cordon"
    assert act({"thermal_slowdown_seconds": 200}) is None
    assert act({"thermal_slowdown_seconds": 400}) == "cordon"
    assert act({"nvlink_down": 1}) == "drain"
    assert act({}) is None


def test_the_agents_cannot_start_line_is_the_evidence_not_the_bare_exit_status():
    """trial 13, F14: a task whose working directory did not exist was diagnosed from its exit status 127 alone
    ("command not found"); the supervisor's own "cannot start" line in the log says what happened."""
    for line, code in (("[gpuplatform] cannot start 'true': working directory '/srv/missing': No such file or "
                        "directory", 127),
                       ("[gpuplatform] cannot start 'train.sh': Permission denied", 126),
                       ("[gpuplatform] cannot start 'trainn': No such file or directory", 127)):
        d = one_task(line, exit_code=code)
        assert (d.category, d.action, d.rule) == ("user_error", "cancel_retries", "agent-cannot-start"), d
        assert d.evidence[0] == {"task": "worker[0]", "source": "log", "line": 1, "offset": 0, "text": line}
        assert line in d.summary


@pytest.mark.parametrize("cause, action, category", [
    ("time_limit", "cancel_retries", "user_error"), ("cancelled", "cancel_retries", "cancelled"),
    ("preempted", "retry", "platform"), ("gang_start_timeout", "retry", "platform")])
def test_the_docs_table_gives_the_platform_causes_action(cause, action, category):
    """New-user trial 14, F22: docs/diagnosis.md's table gave the `platform` category the action "retry" while a
    time-limit failure is diagnosed with `cancel_retries`. The row of the cause's category names each cause's
    action (a time limit, the user's own, is in the `user_error` row: new-user trial 22, F7)."""
    got = engine.diagnose([], rules=shipped_rules(), platform={"cause": cause, "text": "x"})
    assert (got.category, got.action) == (category, action)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "diagnosis.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith(f"| `{category}`"))
    actions = row.rstrip(" |").rsplit("|", 1)[1]
    words = {"time_limit": "a time limit", "cancelled": "a cancel", "preempted": "a preemption",
             "gang_start_timeout": "a gang start timeout"}[cause]
    said = actions.split(";")
    assert any(f"`{action}`" in part and words in part for part in said), actions
