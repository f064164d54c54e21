// Cluster page: draw the figures built in Python (frontend/figures.py), then poll metrics.json and
// update numbers, tables and charts in place with Plotly.react. No reload, no framework.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script.dataset.metricsUrl;
  var interval = parseInt(script.dataset.intervalMs || "3000", 10);
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var figIds = { rates: "fig-rates", queues: "fig-queues", teams: "fig-teams" };

  function draw(figs) {  // false when a `since` answer did not fit the drawn charts
    if (typeof Plotly === "undefined") return true;
    var fits = true;
    Object.keys(figIds).forEach(function (key) {
      var el = document.getElementById(figIds[key]);
      if (el && figs[key] && !window.gpuplatformApplyFigure(el, figs[key], config)) fits = false;
    });
    return fits;
  }

  function setText(sel, value) {
    document.querySelectorAll(sel).forEach(function (el) {
      el.textContent = value === null || value === undefined ? "—" : value;
    });
  }

  function formatClock(iso) {
    if (!iso) return "no cycle yet";
    return iso.slice(0, 16).replace("T", " ") + " UTC";
  }

  function update(payload) {
    Object.keys(payload.numbers).forEach(function (k) {
      setText('[data-metric="' + k + '"]', payload.numbers[k]);
    });
    var clock = document.getElementById("cluster-clock");
    if (clock) { clock.textContent = formatClock(payload.clock); clock.setAttribute("datetime", payload.clock || ""); }
    var info = document.getElementById("cycle-info");
    if (info && payload.cycle !== null) {
      info.textContent = "cycle " + payload.cycle + " · " + Math.round(payload.cycle_ms) + " ms · in that cycle: " +
        payload.cycle_started + " started, " + payload.cycle_pending + " left pending";
    }
    [["largest-runnable", "largest"], ["team-counts", "teams"], ["queue-usage", "queues"]].forEach(function (p) {
      var el = document.getElementById(p[0]);
      if (el && payload.html[p[1]] !== undefined) el.innerHTML = payload.html[p[1]];
    });
    if (draw(payload.figures)) since.set(payload.cursor); else since.reset();
  }

  var initial = document.getElementById("initial-figures");
  var figures = initial ? JSON.parse(initial.textContent) : {};
  draw(figures);
  // Poll only what is new since the last answer (frontend/delta.py); ETag / 304 when nothing is.
  var since = window.gpuplatformSince(url, figures);
  window.gpuplatformPoll(since.url, interval, update);
})();
