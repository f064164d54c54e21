// Dashboards (queues, fragmentation, queueing): draw the figures built in Python, then poll the page's
// data URL and update every chart (Plotly.react, the user's zoom kept) and HTML fragment in place.
// Figure "key" goes to the element #fig-<key>; html fragment "id" replaces the inside of #<id>.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script.dataset.url;
  var interval = parseInt(script.dataset.intervalMs || "5000", 10);
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function draw(figs) {  // false when a `since` answer did not fit the drawn charts
    if (typeof Plotly === "undefined" || !figs) return true;
    var fits = true;
    Object.keys(figs).forEach(function (key) {
      var el = document.getElementById("fig-" + key);
      if (el) {  // an empty figure's note, or its chart: poll.js (gpuplatformApplyFigure)
        if (!window.gpuplatformApplyFigure(el, figs[key], config)) { fits = false; return; }
        el.dataset.points = (el.data || []).reduce(function (n, t) { return n + ((t.x || t.y || []).length); }, 0);
      }
    });
    return fits;
  }

  function update(payload) {
    if (draw(payload.figures)) since.set(payload.cursor); else since.reset();
    Object.keys(payload.html || {}).forEach(function (id) {
      var el = document.getElementById(id);
      if (el) el.innerHTML = payload.html[id];
    });
    document.querySelectorAll("[data-latest]").forEach(function (el) {
      var v = payload.latest && payload.latest[el.dataset.latest];
      if (v !== undefined && v !== null) el.textContent = el.dataset.pct ? (Math.round(v * 1000) / 10) + "%" : v;
    });
  }

  var initial = document.getElementById("initial-figures");
  var figures = initial ? JSON.parse(initial.textContent) : {};
  draw(figures);
  // Poll only what is new since the last answer (frontend/delta.py); ETag / 304 when nothing is.
  var since = window.gpuplatformSince(url, figures);
  window.gpuplatformPoll(since.url, interval, update);
})();
