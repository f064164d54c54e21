"""The queues page's quota what-if (frontend/static/frontend/quota_try.js) under node with a stub DOM and fetch:
the answer shown is always the latest try's, for the values the form holds (new-user trial 10, F15: an earlier,
slower answer overwrote a later one, and an answer stayed on screen after the form was edited or a try failed).
Skipped without node; the browser tests (test_browser.py) drive the real page."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "frontend" / "static" / "frontend" / "quota_try.js"

HARNESS = r"""
const fs = require("fs");
function el(extra) { return Object.assign({textContent: "", hidden: false, children: [], listeners: {},
  appendChild(c) { this.children.push(c); }, addEventListener(t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); },
  fire(t) { (this.listeners[t] || []).forEach(f => f({type: t, preventDefault() {}})); } }, extra || {}); }
const tbody = el();
Object.defineProperty(tbody, "textContent", {get() { return ""; }, set(v) { this.children = []; }});
const field = v => ({value: v, validity: {badInput: false}});
const form = el({queue: field("alpha"), flavor: field("H100"), guarantee: field(""), quota: field(""), limit: field(""),
                 dataset: {url: "/api/v1/forecast/"}, querySelector: () => ({value: "csrf"})});
const out = el(), table = el({hidden: true, querySelector: () => tbody});
global.document = {getElementById: id => ({"quota-try-form": form, "quota-try-status": out, "quota-try-result": table})[id],
                   createElement: () => el()};
const pending = [];
global.fetch = (url, opts) => new Promise((resolve, reject) => pending.push({body: JSON.parse(opts.body), resolve, reject}));
eval(fs.readFileSync(process.argv[2], "utf8"));
function answer(i, queue) {
  const d = {now: "t" + i, evictions: [], queues: [{queue: queue, jobs: 1, mean_wait_before_s: 60, mean_wait_after_s: 0, change_s: -60}]};
  pending[i].resolve({ok: true, json: () => Promise.resolve(d)});
}
const tick = () => new Promise(r => setTimeout(r, 0));
const state = () => ({hidden: table.hidden, rows: tbody.children.map(tr => tr.children[0].textContent), status: out.textContent});
(async () => {
  const seen = {};
  // 1: two tries, the first answered last
  form.quota.value = "8"; form.fire("submit");
  form.quota.value = "16"; form.fire("submit");
  answer(1, "second"); await tick(); await tick();
  answer(0, "first"); await tick(); await tick();
  seen.race = state();
  // 2: the form edited after an answer
  form.quota.value = "4"; form.fire("input");
  seen.edited = state();
  // 3: edited while a try is on its way
  form.fire("submit"); form.quota.value = "5"; form.fire("input");
  answer(2, "old"); await tick(); await tick();
  seen.edited_in_flight = state();
  // 4: a try that gets no answer after one that did
  form.fire("submit"); answer(3, "ok"); await tick(); await tick();
  seen.before_failure = state();
  form.fire("submit"); pending[4].reject(new Error("offline")); await tick(); await tick();
  seen.failure = state();
  process.stdout.write(JSON.stringify(seen));
})();
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_quota_what_if_shows_only_the_latest_answer_for_the_form_as_it_is(tmp_path):
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)
    run = subprocess.run(["node", str(harness), str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    race = seen["race"]
    assert not race["hidden"] and race["rows"] == ["second"], race  # the later try's answer, not the slower one's
    assert "quota 16" in race["status"] and "t1" in race["status"], race
    assert seen["edited"]["hidden"] and seen["edited"]["rows"] == [] and "edited" in seen["edited"]["status"]
    assert seen["edited_in_flight"]["hidden"] and seen["edited_in_flight"]["rows"] == [], seen["edited_in_flight"]
    assert seen["before_failure"]["rows"] == ["ok"] and not seen["before_failure"]["hidden"]
    assert seen["failure"]["hidden"] and seen["failure"]["rows"] == [] and "no answer" in seen["failure"]["status"]
