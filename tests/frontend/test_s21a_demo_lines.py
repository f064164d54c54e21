"""New-user trial 21. F17: the trace demo's last line (`--keep`) gave other counts than its progress lines (this
run's feeder against the database); both read demo.workload_counts_text now. F14: a closed queue demo was still named
in the printed `gpuctl submit` hint; the hint names an open queue of team demo, or says how to reopen one."""
from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from gpuplatform.management.commands import demo as demo_cmd
from tests.frontend.test_demo import tiny_importers  # noqa: F401  (fixture)

FIGURES = re.compile(r"pending (\d+), running (\d+), finished (\d+)")


@pytest.mark.django_db(transaction=True)
def test_the_last_line_of_a_kept_demo_gives_the_figures_of_its_last_progress_line(tiny_importers, monkeypatch):
    monkeypatch.setattr(demo_cmd, "PROGRESS_SECONDS", 0.0)  # a progress line every tick
    args = ["--no-server", "--start-day", "0", "--speed", "3000", "--tick", "0.2", "--password", "pw-demo-123"]
    call_command("demo", "--duration-seconds", "2", *args, stdout=io.StringIO())
    out = io.StringIO()
    call_command("demo", "--duration-seconds", "2", "--keep", *args, stdout=out)
    lines = out.getvalue().splitlines()
    ticks = [m for line in lines if line.startswith("[") and (m := FIGURES.search(line))]
    (last,) = [line for line in lines if line.startswith("demo stopped at cluster time")]
    assert ticks, out.getvalue()
    summary = FIGURES.search(last)
    assert summary is not None, last
    assert summary.groups() == ticks[-1].groups(), (ticks[-1].group(0), last)
    assert int(summary.group(3)) > 0  # the kept run's finished jobs are counted, as the progress lines count them
    assert "submitted by this run" in last and "still to come in the trace" in last


def _demo_team():
    from gpuplatform import services

    services.register_node("local-0", flavor="H200", gpus=[{"index": i, "uuid": f"GPU-0-{i}"} for i in range(2)])
    return demo_cmd.ensure_demo_team("pw", 2)


@pytest.mark.django_db
def test_the_submit_hint_names_an_open_queue_of_team_demo():
    from gpuplatform import services
    from gpuplatform.models import Queue

    team = _demo_team()
    lines = demo_cmd.submit_hint_lines("http://x", "sleep 1", tasks=2, gpus=1, name="hello")
    assert lines == ["  gpuctl submit --queue demo --name hello --tasks 2 --gpus 1 --command 'sleep 1'"]
    services.update_queue(Queue.objects.get(name="demo"), state="closed")
    assert Queue.objects.get(name="demo").state == "closed"
    lines = demo_cmd.submit_hint_lines("http://x", "sleep 1", tasks=2, gpus=1, name="hello")
    assert not any("--queue demo" in line for line in lines), lines
    assert "reopen" in lines[0] and "queue demo is closed" in lines[0], lines
    services.create_queue("demo2", team=team)
    lines = demo_cmd.submit_hint_lines("http://x", "sleep 1", tasks=2, gpus=1, name="hello")
    assert lines[0].startswith("  gpuctl submit --queue demo2 ") and "queue demo is closed" in lines[1], lines
