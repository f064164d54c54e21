"""Node agent: reads the node's GPUs (NVML or `nvidia-smi -q -x`), registers the node and sends
heartbeats with GPU health to the control plane's REST API. See inventory.py and client.py."""
from .client import AgentError, heartbeat_body, post_json, register_body, run_agent
from .inventory import GpuInventory, InventoryError, apply_health, read_nvidia_smi_xml, read_nvml

__all__ = ["AgentError", "GpuInventory", "InventoryError", "apply_health", "heartbeat_body", "post_json",
           "read_nvidia_smi_xml", "read_nvml", "register_body", "run_agent", "make_reader"]


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
        try:
            read_nvml(pynvml)
            return lambda: read_nvml(pynvml)
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
