"""Node agent: reads the node's GPUs (NVML or `nvidia-smi -q -x`), registers the node, sends heartbeats
with GPU health to the control plane's REST API and executes the node's tasks (docs/execution.md). See
inventory.py, client.py, runner.py (the assignments/reports loop), executor.py (process groups, state
directories) and supervise.py (the per-task supervisor, run by path). Standard library only."""
from .client import AgentError, get_json, heartbeat_body, post_json, register_body, run_agent
from .executor import ExecutorError, ProcessExecutor
from .inventory import (
    GpuInventory, InventoryError, NvmlReader, apply_health, demo_copies, read_nvidia_smi_xml, read_nvml,
)
from .runner import AgentLoop

__all__ = ["AgentError", "AgentLoop", "ExecutorError", "GpuInventory", "InventoryError", "NvmlReader",
           "ProcessExecutor", "apply_health", "demo_copies", "get_json", "heartbeat_body", "post_json",
           "read_nvidia_smi_xml", "read_nvml", "register_body", "run_agent", "make_reader", "make_telemetry"]


def make_telemetry(dcgm_exporter_url: str | None = None):
    """The node's telemetry sampler (agent/telemetry.py): a dcgm-exporter at `dcgm_exporter_url` when given,
    else NVML through nvidia-ml-py when it imports and initialises, else None (no telemetry: the platform
    shows "no telemetry" for these GPUs, never zeros)."""
    from .telemetry import DcgmExporterSampler, NvmlSampler

    if dcgm_exporter_url:
        return DcgmExporterSampler(dcgm_exporter_url)
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    sampler = NvmlSampler(pynvml)
    return sampler if sampler._init() else None


def make_reader(nvidia_smi_xml: str | None = None):
    """A no-argument inventory reader: the given nvidia-smi XML file (re-read each call), else NVML via
    nvidia-ml-py (imported lazily), else `nvidia-smi -q -x` run as a subprocess. Raises InventoryError."""
    import shutil
    import subprocess

    if nvidia_smi_xml:
        def from_file():
            with open(nvidia_smi_xml, encoding="utf-8") as fh:
                return read_nvidia_smi_xml(fh.read(), sysfs_root="/sys")
        return from_file
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        pynvml = None
    if pynvml is not None:
        reader = NvmlReader(pynvml)  # keeps each GPU's last read: one NVML loses is reported unhealthy, not dropped
        try:
            reader()
            return reader
        except InventoryError:
            pass
    if shutil.which("nvidia-smi"):
        def from_smi():
            out = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=60, check=False)
            if out.returncode != 0:
                raise InventoryError(f"nvidia-smi failed: {out.stderr.strip()[:200]}")
            return read_nvidia_smi_xml(out.stdout, sysfs_root="/sys")
        return from_smi
    raise InventoryError("no NVML (nvidia-ml-py / driver) and no nvidia-smi on this host; use --nvidia-smi-xml FILE")
