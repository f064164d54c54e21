"""The validation step of the repair path with a check command, run by the real agent loop against the
live web app (loopback): the heartbeat's answer starts the command on the node, its exit status and output
decide, and the result goes through POST nodes/{name}/validation/ (validating -> ready, or back to
in_repair with the reason). Plus run_check on its own: exit status, the FAIL mark, timeout, a missing
program."""
from __future__ import annotations

import sys
import time

import pytest

from gpuplatform import services
from gpuplatform.agent import ProcessExecutor
from gpuplatform.agent.inventory import GpuInventory
from gpuplatform.agent.runner import AgentLoop
from gpuplatform.agent.validation import run_check
from gpuplatform.models import Event, Node


def test_run_check_judges_exit_status_and_output():
    ok = run_check([sys.executable, "-c", "print('8 GPUs visible')"])
    assert ok["passed"] is True and "exit 0" in ok["detail"] and "8 GPUs visible" in ok["detail"]
    bad = run_check([sys.executable, "-c", "import sys; print('gpu3 missing'); sys.exit(3)"])
    assert bad["passed"] is False and "exit 3" in bad["detail"] and "gpu3 missing" in bad["detail"]
    marked = run_check([sys.executable, "-c", "print('VALIDATION: FAIL nccl-tests busbw 12 GB/s')"])
    assert marked["passed"] is False and "VALIDATION: FAIL" in marked["detail"]
    slow = run_check([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)
    assert slow["passed"] is False and "ran past 0.5 s" in slow["detail"]
    missing = run_check(["/nonexistent/dcgmi", "diag", "-r", "1"])
    assert missing["passed"] is False and "could not start" in missing["detail"]
    assert run_check([])["passed"] is False


def _inventory():
    return [GpuInventory(index=i, model="NVIDIA H100", memory_mib=81559, uuid=f"GPU-{i}", pci_bus_id=f"0000:{i:02x}:00.0",
                         numa_node=0 if i < 4 else 1) for i in range(8)]


def _validate_with(node_name: str, argv: list[str], live_server, tmp_path) -> Node:
    node = Node.objects.get(name=node_name)
    services.cordon_node(node)
    services.start_repair(node, reason="XID 79")
    services.start_validation(node, check_command=argv)
    token = services.issue_node_agent_token([node_name])
    loop = AgentLoop(live_server.url, token, node_name, _inventory, ProcessExecutor(str(tmp_path / "agent")),
                     interval=0.2, poll=0.1, resources=(64000, 512000), timeout=10)
    deadline = time.monotonic() + 30
    loop.run(should_stop=lambda: time.monotonic() > deadline
             or Node.objects.get(name=node_name).state != Node.State.VALIDATING)
    return Node.objects.get(name=node_name)


@pytest.mark.django_db(transaction=True)
def test_the_agent_runs_the_check_command_and_a_pass_makes_the_node_ready(cluster, live_server, tmp_path):
    argv = [sys.executable, "-c", "print('all 8 GPUs answer NVML; p2p ok')"]
    node = _validate_with("n0", argv, live_server, tmp_path)
    assert node.state == Node.State.READY
    assert node.validation["passed"] is True and "p2p ok" in node.validation["detail"]
    assert node.validation["check_command"] == argv
    assert Event.objects.filter(kind="validation_passed", node=node).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_failing_check_sends_the_node_back_to_repair_with_its_output(cluster, live_server, tmp_path):
    argv = [sys.executable, "-c", "import sys; print('gpu 5: fallen off the bus'); sys.exit(1)"]
    node = _validate_with("n1", argv, live_server, tmp_path)
    assert node.state == Node.State.IN_REPAIR
    assert node.validation["passed"] is False and "fallen off the bus" in node.validation["detail"]
    assert "validation failed" in node.health_reason
    assert Event.objects.filter(kind="validation_failed", node=node).count() == 1


def test_the_configured_command_is_used_when_the_admin_gives_none(cluster, settings):
    settings.NODE_VALIDATION_COMMAND = ["/usr/bin/dcgmi", "diag", "-r", "1"]
    node = Node.objects.get(name="n2")
    services.cordon_node(node)
    services.start_repair(node)
    services.start_validation(node)
    assert Node.objects.get(name="n2").validation["check_command"] == ["/usr/bin/dcgmi", "diag", "-r", "1"]
