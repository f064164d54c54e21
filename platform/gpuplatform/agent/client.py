"""The node agent: read the GPUs, register the node, send heartbeats over the REST API (urllib only).

Endpoints (the API is built separately; header `Authorization: Token <TOKEN>`, JSON bodies):

    POST {api}/api/v1/nodes/register/
    {"name": "gpu-node-01", "flavor": "H200", "cpu_milli": 16000, "memory_mib": 257000,
     "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.memory": "143771"},
     "address": "10.0.0.7", "runtime": "",
     "gpus": [{"index": 0, "uuid": "GPU-...", "model": "NVIDIA H200", "memory_mib": 143771,
               "pci_bus_id": "00000000:00:06.0", "numa_node": 0, "mig_mode": "disabled",
               "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0, "retired_pages_dbe": null,
               "row_remap_failure": false, "nvlink_peers": [], "xids": [],
               "health": "healthy", "health_reason": ""}]}

    POST {api}/api/v1/nodes/{name}/heartbeat/
    {"time": "2026-01-01T12:00:00+00:00",
     "gpus": [{"index": 0, "health": "healthy", "health_reason": "", "ecc_uncorrected_volatile": 0}]}

memory in MiB, cpu in millicores, time ISO 8601 UTC. The register body maps onto
services.register_node(name, flavor=..., gpus=..., cpu_milli=..., memory_mib=..., labels=...), the
heartbeat onto services.record_heartbeat(name, gpus=..., at=time). A non-2xx answer or a network
error raises `AgentError`; `run_agent` logs it and retries at the next interval. "address" (where other
nodes reach this one, e.g. MASTER_ADDR) and "runtime" ("" or "docker"/"podman") are sent by the
gpu_agent command.

Executing tasks (assignments and reports, docs/execution.md) is runner.AgentLoop's job, started by
`run_agent(..., executor=ProcessExecutor(...))`.
"""
from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Callable

from .inventory import GpuInventory, flavor_of

__all__ = ["AgentError", "register_body", "heartbeat_body", "post_json", "get_json", "run_agent", "host_resources",
           "gpu_identity", "needs_registration"]

log = logging.getLogger("gpuplatform.agent")


class AgentError(RuntimeError):
    """The API refused a request or could not be reached. `status` is the HTTP status or None; `body` the refusal's
    decoded JSON ({"tasks[0].cause": ["unknown field ..."]}), None when it had none (or no answer came)."""

    def __init__(self, message: str, status: int | None = None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body


def host_resources(meminfo: str = "/proc/meminfo") -> tuple[int, int]:
    """(cpu millicores, memory MiB) of this host; memory 0 when /proc/meminfo is unreadable."""
    cpu = (os.cpu_count() or 0) * 1000
    try:
        with open(meminfo) as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
        return cpu, kib // 1024
    except (OSError, StopIteration, ValueError):
        return cpu, 0


def gpu_identity(gpus: list[GpuInventory]) -> tuple:
    """Which GPU each NVML index is ((index, uuid) each): what heartbeats and telemetry, which name GPUs by index, rely
    on the last registration for. NVML numbers the GPUs it sees 0..n-1, so one gone from it (fallen off the bus, a
    driver reloaded) renumbers those after it: the agent registers again before a heartbeat under the new numbering
    (the server follows each GPU's UUID to its new index: services/nodes.py)."""
    return tuple((g.index, g.uuid) for g in gpus)


def needs_registration(registered: tuple | None, gpus: list[GpuInventory]) -> bool:
    """Whether inventory `gpus` must be registered before the next heartbeat: `registered`, the gpu_identity of the
    last registration, is None (none yet) or not theirs (a GPU gone from NVML, or NVML renumbered them): heartbeats
    name GPUs by index. A change is logged as a warning (a first registration is not). Both agent loops ask this
    (run_agent, runner.AgentLoop.heartbeat). Raises nothing."""
    if registered == gpu_identity(gpus):
        return False
    if registered is not None:
        log.warning("GPU inventory changed (%d -> %d GPU(s) or renumbered): registering again",
                    len(registered), len(gpus))
    return True


def register_body(name: str, gpus: list[GpuInventory], *, cpu_milli: int = 0, memory_mib: int = 0,
                  address: str | None = None, runtime: str | None = None) -> dict:
    """The register call's JSON body. `address` (the IP or host name other nodes reach this one at) and
    `runtime` ("" or "docker"/"podman") are included when given (not None)."""
    # the node's model from its first GPU that NVML read it for, a healthy one first (one NVML cannot read any more,
    # never read before, has none: agent/inventory.py read_nvml)
    named = sorted((g for g in gpus if g.model), key=lambda g: g.health != "healthy")
    model = named[0].model if named else ""
    labels = {"nvidia.com/gpu.count": str(len(gpus))}
    if named:
        labels["nvidia.com/gpu.product"] = model.replace(" ", "-")
        if named[0].memory_mib is not None:
            labels["nvidia.com/gpu.memory"] = str(named[0].memory_mib)
    body = {"name": name, "flavor": flavor_of(model) if model else "", "cpu_milli": cpu_milli,
            "memory_mib": memory_mib, "labels": labels, "gpus": [g.to_dict() for g in gpus]}
    if address is not None:
        body["address"] = address
    if runtime is not None:
        body["runtime"] = runtime
    return body


def heartbeat_body(gpus: list[GpuInventory], at: datetime | None = None) -> dict:
    at = at or datetime.now(timezone.utc)
    # Each GPU's health-rule signals (XIDs seen, volatile double-bit ECC, row-remap failure) and topology facts
    # (model, PCI bus id, NVLink peers, NUMA node) for the server's health rules and topology audit.
    return {"time": at.isoformat(), "gpus": [{"index": g.index, "health": g.health, "health_reason": g.health_reason,
                                              "ecc_uncorrected_volatile": g.ecc_uncorrected_volatile,
                                              "xids": list(g.xids), "row_remap_failure": g.row_remap_failure,
                                              "model": g.model, "pci_bus_id": g.pci_bus_id,
                                              "nvlink_peers": list(g.nvlink_peers), "numa_node": g.numa_node}
                                             for g in gpus]}


def _request(method: str, url: str, token: str, body: dict | None, timeout: float) -> dict:
    headers = {"Accept": "application/json", "Authorization": f"Token {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read(65536)
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
        detail = raw[:300].decode(errors="replace")
        raise AgentError(f"{method} {url}: HTTP {exc.code} {detail}", exc.code, body) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: http.client.InvalidURL etc.
        raise AgentError(f"{method} {url}: {exc}") from None
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {}


def post_json(url: str, token: str, body: dict, *, timeout: float = 10.0) -> dict:
    """POST `body` as JSON; return the decoded JSON answer ({} when empty or not JSON). Raises AgentError
    (`status` = the HTTP status of a non-2xx answer, None for a network error)."""
    return _request("POST", url, token, body, timeout)


def get_json(url: str, token: str, *, timeout: float = 10.0) -> dict:
    """GET `url`; return the decoded JSON answer ({} when empty or not JSON). Raises AgentError
    (`status` = the HTTP status of a non-2xx answer, None for a network error)."""
    return _request("GET", url, token, None, timeout)


def run_agent(api: str, token: str, node_name: str, read: Callable[[], list[GpuInventory]], *,
              once: bool = False, interval: float = 30.0, max_beats: int | None = None,
              sleep: Callable[[float], None] = time.sleep, resources: tuple[int, int] | None = None,
              address: str | None = None, runtime: str | None = None, executor=None, poll: float = 2.0,
              max_cycles: int | None = None, should_stop: Callable[[], bool] | None = None,
              telemetry=None, telemetry_seconds: float = 10.0) -> int:
    """Register, then heartbeat every `interval` seconds. once: register + one heartbeat, errors raise (no
    execution even with an executor). Returns the number of heartbeats sent. `read` returns the current
    inventory (health included). `address` / `runtime` go into the register body when not None.

    With `executor` (an agent.executor.ProcessExecutor) and not `once`, the node also executes its tasks:
    runner.AgentLoop polls the assignments every `poll` seconds (the server's poll_seconds once answered)
    and posts the reports (docs/execution.md); it stops after `max_cycles` assignment rounds, `max_beats`
    heartbeats or when `should_stop()` is true (else it runs forever). `telemetry`: a sampler
    (agent/telemetry.py) sampled every `telemetry_seconds` and sent with each heartbeat (executing agents)."""
    if executor is not None and not once:
        from .runner import AgentLoop

        loop = AgentLoop(api, token, node_name, read, executor, address=address, runtime=runtime,
                         interval=interval, poll=poll, resources=resources, sleep=sleep, telemetry=telemetry,
                         telemetry_seconds=telemetry_seconds)
        loop.run(max_cycles=max_cycles, max_beats=max_beats, should_stop=should_stop)
        return loop.beats
    base = api.rstrip("/")
    cpu, mem = resources if resources is not None else host_resources()
    reg_url = f"{base}/api/v1/nodes/register/"
    beat_url = f"{base}/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}/heartbeat/"
    registered, beats = None, 0  # the GPUs (gpu_identity) of the last registration
    while True:
        try:
            gpus = read()
            if needs_registration(registered, gpus):  # first, or NVML renumbered: heartbeats go by index
                post_json(reg_url, token, register_body(node_name, gpus, cpu_milli=cpu, memory_mib=mem,
                                                        address=address, runtime=runtime))
                registered = gpu_identity(gpus)
                log.info("registered %s with %d GPU(s)", node_name, len(gpus))
            post_json(beat_url, token, heartbeat_body(gpus))
            beats += 1
        except AgentError as exc:
            if once:
                raise
            log.warning("agent: %s", exc)
        if once or (max_beats is not None and beats >= max_beats) or (should_stop is not None and should_stop()):
            return beats
        sleep(interval)
