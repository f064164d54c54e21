"""New-user trial 25 (federation, 2): a chart with no data shows a "no data yet" note, not plotly's empty axes
(the cluster page drew a made-up 'Jan 2000 ... Nov 2000' date axis). The figure carries `empty`
(figures.with_empty_state) and poll.js's gpuplatformApplyFigure, which draws every polled page's charts (cluster
and dashboards), shows that sentence instead of calling Plotly; new points for such a chart ask for the whole
figure, and a figure with data replaces the note."""
from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from frontend import figures

POLL = Path(__file__).resolve().parents[2] / "frontend" / "static" / "frontend" / "poll.js"


def test_the_cluster_pages_figures_without_data_carry_their_empty_sentence():
    t = datetime(2026, 12, 4, tzinfo=timezone.utc)
    for fig in (figures.rates_figure([]), figures.queue_usage_figure([]), figures.team_jobs_figure([])):
        assert fig["empty"].startswith(("No data yet", "No running or pending jobs")), fig
    assert "empty" not in figures.rates_figure([{"time": t, "allocation_rate": 0.5, "fragmentation_rate": 0.1}])
    assert "empty" not in figures.queue_usage_figure([{"time": t, "queue": "a", "used": 2}])
    assert "empty" not in figures.team_jobs_figure([{"team": "a", "running": 1, "pending": 0}])


HARNESS = r"""
const fs = require("fs");
function el() { return {children: [], dataset: {}, set innerHTML(v) { this.children = []; },
  appendChild(c) { this.children.push(c); }}; }
global.window = global; global.document = {addEventListener() {}, createElement: () => ({})};
const calls = [];
global.Plotly = {react: (e, d) => { calls.push("react"); e.data = d; }, purge: e => { calls.push("purge"); delete e.data; },
                 extendTraces: () => calls.push("extend")};
eval(fs.readFileSync(process.argv[2], "utf8"));
const div = el(), seen = {};
seen.empty = [gpuplatformApplyFigure(div, {data: [{x: [], y: []}], layout: {}, empty: "No data yet: soon."}, {}),
              div.children.map(c => c.textContent), calls.slice()];
seen.extend_on_empty = gpuplatformApplyFigure(div, {extend: {x: [["t"]], y: [[1]]}, names: ["a"], points: 9}, {});
seen.full = [gpuplatformApplyFigure(div, {data: [{name: "a", x: ["t"], y: [1]}], layout: {}}, {}),
             div.children.length, "empty" in div.dataset, calls.slice()];
process.stdout.write(JSON.stringify(seen));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_poll_js_shows_the_empty_sentence_instead_of_empty_axes(tmp_path):
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)
    run = subprocess.run(["node", str(harness), str(POLL)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["empty"] == [True, ["No data yet: soon."], ["purge"]]  # the note, no axes drawn
    assert seen["extend_on_empty"] is False  # new points: the caller asks for the whole figure
    assert seen["full"] == [True, 0, False, ["purge", "react"]]  # the chart replaces the note
