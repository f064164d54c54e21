"""GPU telemetry on the platform side (DESIGN section 14, docs/telemetry.md): ingestion of the agents'
batches (ingest.py), retention and downsampling with per-task summaries (retention.py), idle allocations
(idle.py) and the latest XID / ECC per GPU for health rules (signals.py). The agent side is agent/telemetry.py."""
from .idle import detect_idle, idle_allocations
from .ingest import ingest_telemetry
from .retention import downsample, task_summary
from .signals import latest_gpu_signals, latest_xids

__all__ = ["ingest_telemetry", "downsample", "task_summary", "detect_idle", "idle_allocations", "latest_gpu_signals",
           "latest_xids"]
