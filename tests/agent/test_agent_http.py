"""The agent against a tiny local HTTP server (127.0.0.1, random port) that records the requests, and the
register/heartbeat bodies applied through services."""
from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from gpuplatform.agent import AgentError, read_nvidia_smi_xml, read_nvml, run_agent
from tests.agent.fake_nvml import FakeNVML

XML_PATH = Path(__file__).resolve().parents[2] / "data" / "nvidia-h200-node" / "nvidia-smi-q.xml"


@pytest.fixture
def server():
    seen: list[dict] = []
    state = {"status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "type": self.headers.get("Content-Type"), "body": json.loads(body)})
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"ok": true}')

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen, state
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_agent_registers_then_heartbeats(server):
    url, seen, _ = server
    beats = run_agent(url, "s3cret", "h200-a", lambda: read_nvml(FakeNVML(), sysfs_root="/nonexistent"),
                      interval=0.01, max_beats=3, sleep=lambda s: None, resources=(16000, 257000))
    assert beats == 3
    assert [r["path"] for r in seen] == ["/api/v1/nodes/register/"] + ["/api/v1/nodes/h200-a/heartbeat/"] * 3
    assert all(r["auth"] == "Token s3cret" and r["type"] == "application/json" for r in seen)
    reg = seen[0]["body"]
    assert (reg["name"], reg["flavor"], reg["cpu_milli"], reg["memory_mib"]) == ("h200-a", "H200", 16000, 257000)
    assert reg["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert reg["gpus"][0]["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert reg["gpus"][0]["memory_mib"] == 143771 and reg["gpus"][0]["mig_mode"] == "disabled"
    assert seen[1]["body"]["gpus"] == [{"index": 0, "health": "healthy", "health_reason": "",
                                       "ecc_uncorrected_volatile": 0, "xids": [], "row_remap_failure": False,
                                       "model": "NVIDIA H200", "pci_bus_id": "00000000:00:06.0", "nvlink_peers": [],
                                       "numa_node": None}]  # health-rule signals and topology facts (docs/diagnosis.md)


def test_agent_once_raises_on_http_error_and_loop_retries(server):
    url, seen, state = server
    state["status"] = 401
    with pytest.raises(AgentError) as exc:
        run_agent(url, "bad", "n1", lambda: [], once=True, resources=(0, 0))
    assert exc.value.status == 401
    calls = []

    def sleep(s):
        calls.append(s)
        state["status"] = 200  # the server comes back after the first failure

    assert run_agent(url, "t", "n1", lambda: [], interval=5, max_beats=1, sleep=sleep, resources=(0, 0)) == 1
    assert calls == [5] and seen[-2]["path"] == "/api/v1/nodes/register/"


def test_gpu_agent_command_with_nvidia_smi_xml(server):
    url, seen, _ = server
    out = io.StringIO()
    call_command("gpu_agent", "--api", url + "/", "--token", "tok", "--node-name", "h200-node", "--once",
                 "--nvidia-smi-xml", str(XML_PATH), stdout=out)
    assert "h200-node: registered, 1 heartbeat(s) sent" in out.getvalue()
    assert seen[0]["body"]["gpus"][0]["pci_bus_id"] == "00000000:00:06.0"
    with pytest.raises(CommandError):
        call_command("gpu_agent", "--api", "http://127.0.0.1:9", "--token", "t", "--once",
                     "--nvidia-smi-xml", str(XML_PATH), stdout=io.StringIO())


def test_bodies_apply_through_the_node_services(db):
    """The JSON the agent sends is what services.register_node / record_heartbeat take."""
    from gpuplatform import services
    from gpuplatform.agent import heartbeat_body, register_body
    from gpuplatform.models import Event, Gpu, Node

    gpus = read_nvidia_smi_xml(XML_PATH.read_text())
    reg = json.loads(json.dumps(register_body("h200-node", gpus, cpu_milli=16000, memory_mib=257000)))
    node = services.register_node(reg["name"], flavor=reg["flavor"], gpus=reg["gpus"],
                                       cpu_milli=reg["cpu_milli"], memory_mib=reg["memory_mib"], labels=reg["labels"])
    assert (node.flavor, node.gpu_count, node.labels["nvidia.com/gpu.count"]) == ("H200", 1, "1")
    assert Gpu.objects.get(node=node).uuid == "GPU-00000000-1111-2222-3333-444444444444"
    Node.objects.filter(pk=node.pk).update(state="not_ready")
    gpus[0].ecc_uncorrected_volatile = 1
    from gpuplatform.agent import apply_health
    apply_health(gpus[0])
    beat = json.loads(json.dumps(heartbeat_body(gpus)))
    node = services.record_heartbeat("h200-node", gpus=beat["gpus"])
    g = Gpu.objects.get(node=node)
    assert (g.health, g.health_reason) == ("unhealthy", "1 uncorrectable ECC error(s)")
    assert node.state == "ready" and node.last_heartbeat is not None
    # the ECC count is also a health-rule signal: the rule ecc-dbe-volatile fires once (docs/diagnosis.md)
    assert set(Event.objects.values_list("kind", flat=True)) == {"node_registered", "gpu_health", "node_ready",
                                                                 "health_rule"}
    assert Event.objects.get(kind="health_rule").data["rule"] == "ecc-dbe-volatile"
    services.record_heartbeat("h200-node", gpus=beat["gpus"])  # no change: no new event
    assert Event.objects.count() == 4


def test_the_node_services_validation(db):
    from gpuplatform import services
    from gpuplatform.models import Event, Node
    from gpuplatform.services import ValidationError

    with pytest.raises(ValidationError) as exc:
        services.register_node("", flavor="", gpus=[{"index": 0}, {"index": 0}], cpu_milli=-1)
    assert set(exc.value.errors) == {"name", "flavor", "cpu_milli", "gpus[1].index"}
    with pytest.raises(ValidationError, match="register it first"):
        services.record_heartbeat("ghost", gpus=[])
    services.register_node("n", flavor="H100", gpus=[{"index": 0}])
    with pytest.raises(ValidationError, match="has no GPU 5"):
        services.record_heartbeat("n", gpus=[{"index": 5}])
    assert Node.objects.count() == 1 and Event.objects.count() == 1


def test_gpu_agent_takes_its_token_from_the_environment_or_a_private_file(server, tmp_path, monkeypatch):
    """New-user report item 16: the local agents had `--token <hex>` on their command line (`ps` shows it to
    every local user). The token now comes from GPUPLATFORM_AGENT_TOKEN or a mode-0600 --token-file; the
    local launcher puts it in the environment, never in argv; --token still works."""
    from gpuplatform.agent.local import agent_argv

    url, seen, _ = server
    run = ["gpu_agent", "--api", url + "/", "--node-name", "h200-node", "--once", "--nvidia-smi-xml", str(XML_PATH)]
    monkeypatch.setenv("GPUPLATFORM_AGENT_TOKEN", "from-env")
    call_command(*run, stdout=io.StringIO())
    assert {r["auth"] for r in seen} == {"Token from-env"}
    monkeypatch.delenv("GPUPLATFORM_AGENT_TOKEN")
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    secret.chmod(0o600)
    seen.clear()
    call_command(*run, "--token-file", str(secret), stdout=io.StringIO())
    assert {r["auth"] for r in seen} == {"Token from-file"}
    secret.chmod(0o644)
    with pytest.raises(CommandError, match="chmod 600"):
        call_command(*run, "--token-file", str(secret), stdout=io.StringIO())
    with pytest.raises(CommandError, match="GPUPLATFORM_AGENT_TOKEN"):
        call_command(*run, stdout=io.StringIO())
    argv = agent_argv("http://127.0.0.1:8000", "local-0", work_dir=tmp_path)
    assert "--token" not in argv and not any("from-" in a for a in argv)
