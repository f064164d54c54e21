"""The agent's telemetry sampler (agent/telemetry.py) through the fake NVML (tests/agent/fake_nvml.py):
fields, unsupported calls, XID events, a lost GPU, a driver that disappears mid-run, the dcgm-exporter
source, the bounded buffer, and the AgentLoop sending batches to the telemetry endpoint."""
from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from gpuplatform.agent.runner import AgentLoop
from gpuplatform.agent.telemetry import (
    FIELDS, DcgmExporterSampler, NvmlSampler, TelemetryBuffer, parse_prometheus_text,
)
from tests.agent.fake_nvml import FakeNVML

T0 = 1_764_556_800.0


def eight_gpu_nvml(**kw) -> FakeNVML:
    base = FakeNVML()
    dump = copy.deepcopy(base.dump)
    first = dump["gpus"][0]
    dump["gpus"] = [dict(first, index=i, uuid=f"GPU-{i}") for i in range(8)]
    return FakeNVML(dump, **kw)


def row(rows, gpu):
    return dict(zip(FIELDS, next(r for r in rows if r[1] == gpu)))


def test_sample_reads_every_field_in_wire_units():
    nvml = eight_gpu_nvml()
    nvml.set(3, sm=87, memory_used_bytes=40 * 2**30, power_usage_mw=612_500, temperature_c=61, throttle_reasons=0x4,
             ecc_volatile_uncorrected=2)
    rows, xids = NvmlSampler(nvml, clock=lambda: T0).sample()
    assert len(rows) == 8 and xids == []
    r = row(rows, 3)
    total_mib = nvml.dump["gpus"][3]["memory_total_bytes"] // 2**20
    assert r == {"t": T0, "gpu": 3, "sm": 87, "fb_used": 40 * 1024, "fb_free": total_mib - 40 * 1024, "power": 612.5,
                 "temp": 61, "throttle": 4, "ecc_dbe": 2, "nvlink_down": None}  # the H200 dump has no NVLink
    assert row(rows, 0)["sm"] == 0  # the recorded idle H200: a real zero, reported as such


@pytest.mark.parametrize("missing,field", [
    ("nvmlDeviceGetUtilizationRates", "sm"), ("nvmlDeviceGetPowerUsage", "power"),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", "throttle"), ("nvmlDeviceGetTotalEccErrors", "ecc_dbe"),
])
def test_an_unsupported_call_leaves_its_field_empty_never_zero(missing, field):
    nvml = eight_gpu_nvml(unsupported={missing})
    nvml.set(0, sm=50, power_usage_mw=300_000, throttle_reasons=1, ecc_volatile_uncorrected=1)
    rows, _ = NvmlSampler(nvml, clock=lambda: T0).sample()
    r = row(rows, 0)
    assert r[field] is None
    assert all(v is not None for k, v in r.items() if k not in (field, "nvlink_down"))


def test_xid_events_come_from_the_event_set_once_each():
    nvml = eight_gpu_nvml()
    sampler = NvmlSampler(nvml, clock=lambda: T0)
    sampler.sample()
    nvml.xid(5, 79)
    nvml.xid(2, 48)
    _, xids = sampler.sample()
    assert sorted(x[1:] for x in xids) == [[2, 48], [5, 79]]
    assert sampler.sample()[1] == []
    # without event-set support: no XIDs, the rest still sampled
    nvml2 = eight_gpu_nvml(unsupported={"nvmlEventSetCreate"})
    nvml2.xid(1, 79)
    rows, xids = NvmlSampler(nvml2, clock=lambda: T0).sample()
    assert len(rows) == 8 and xids == []


def test_a_lost_gpu_gets_no_row_and_the_others_keep_reporting():
    nvml = eight_gpu_nvml()
    sampler = NvmlSampler(nvml, clock=lambda: T0)
    nvml.lose_gpu(6)
    rows, _ = sampler.sample()
    assert sorted(r[1] for r in rows) == [0, 1, 2, 3, 4, 5, 7]


def test_driver_disappearing_mid_run_gives_no_rows_then_recovers():
    nvml = eight_gpu_nvml()
    sampler = NvmlSampler(nvml, clock=lambda: T0)
    assert len(sampler.sample()[0]) == 8
    nvml.lose_driver()
    assert sampler.sample() == ([], [])  # nothing, not zeros
    assert sampler.sample() == ([], [])  # init fails while the driver is gone: still nothing, no exception
    nvml.restore_driver()
    assert len(sampler.sample()[0]) == 8
    assert nvml.calls.count("init") >= 2  # initialised again


def test_no_nvml_at_all_gives_no_rows():
    rows, xids = NvmlSampler(eight_gpu_nvml(fail_init=True)).sample()
    assert rows == [] and xids == []


DCGM_TEXT = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 93
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 0
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 61234
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 512.345
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3",Hostname="n1",err_code="79",err_msg="GPU has fallen off the bus"} 79
"""


def test_dcgm_exporter_is_an_equal_source():
    assert parse_prometheus_text(DCGM_TEXT)[0] == ("DCGM_FI_DEV_GPU_UTIL", {
        "gpu": "0", "UUID": "GPU-a", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "n1"}, 93.0)
    sampler = DcgmExporterSampler("http://n1:9400/metrics", fetch=lambda url: DCGM_TEXT, clock=lambda: T0)
    rows, xids = sampler.sample()
    r0, r1 = row(rows, 0), row(rows, 1)
    assert (r0["sm"], r0["fb_used"], r0["power"], r0["temp"]) == (93, 61234, 512.3, None)
    assert r1["sm"] == 0 and r1["fb_used"] is None
    assert xids == [[T0, 1, 79]]
    assert sampler.sample()[1] == []  # the same last XID is not a new event

    def down(url):
        raise OSError("connection refused")
    assert DcgmExporterSampler("http://n1:9400/metrics", fetch=down).sample() == ([], [])


def test_buffer_is_bounded_and_batches_are_bounded():
    buf = TelemetryBuffer(10.0, max_rows=50, batch_rows=20)
    buf.add([[T0 + i, 0] + [1] * 8 for i in range(70)], [])
    assert len(buf.rows) == 50 and buf.dropped == 20
    body = buf.batch()
    assert len(body["rows"]) == 20 and body["rows"][0][0] == T0 + 20  # the oldest were dropped
    buf.ack(body)
    assert len(buf.rows) == 30


class _Capture(BaseHTTPRequestHandler):
    bodies: list = []
    status = 200

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append((self.path, body))
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"accepted": 1}')

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"tasks": []}')

    def log_message(self, *a):
        pass


def test_agent_loop_samples_and_sends_telemetry_with_its_heartbeats(tmp_path):
    from gpuplatform.agent.executor import ProcessExecutor

    _Capture.bodies = []
    httpd = HTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        nvml = eight_gpu_nvml()
        nvml.set(0, sm=70)
        loop = AgentLoop(f"http://127.0.0.1:{httpd.server_port}", "tok", "n1", lambda: [],
                         ProcessExecutor(str(tmp_path)), interval=0.3, poll=0.05, sleep=lambda s: __import__("time").sleep(min(s, 0.05)),
                         telemetry=NvmlSampler(nvml), telemetry_seconds=0.1, resources=(1000, 1000))
        loop.run(max_beats=4)
        sent = [b for p, b in _Capture.bodies if p.endswith("/telemetry/")]
        assert sent, "no telemetry call"
        rows = [r for b in sent for r in b["rows"]]
        assert all(b["fields"] == list(FIELDS) for b in sent)
        assert {r[1] for r in rows} == set(range(8)) and loop.samples >= 2
        assert any(r[1] == 0 and r[2] == 70 for r in rows)
        assert loop.telemetry_bytes > 0 and len(loop.telemetry_buffer.rows) <= 8 * loop.samples
    finally:
        httpd.shutdown()
