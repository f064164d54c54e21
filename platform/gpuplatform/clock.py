"""The cluster clock: what "now" means for submissions, cancellations and the audit log.

Wall time in production. The demo replays a trace on a simulated clock and points this at it (`use`), so a
job submitted from the form, the API or gpuctl while the demo runs is stamped with the same clock as the
trace's jobs and the scheduling cycles (otherwise it would be submitted years after it starts).
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable

from django.utils import timezone

_source: Callable[[], datetime] | None = None


def now() -> datetime:
    return _source() if _source is not None else timezone.now()


def use(source: Callable[[], datetime] | None) -> None:
    """Make `source` the cluster clock (None: back to wall time)."""
    global _source
    _source = source
