"""Fixtures shared by the agent tests."""
from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def procs():
    """Processes a test started: killed and reaped at the end, whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
