// Topology map: fetch /topology.json (figure built in Python, frontend/topology.py), draw it with
// Plotly.react, zoom on click (a domain column, a GPU's domain, a domain label), filter through the form
// without a reload, and poll for changes. Works on the topology page and embedded on a job page.
(function () {
  "use strict";
  var el = document.getElementById("topology");
  if (!el || typeof Plotly === "undefined") return;
  var form = document.getElementById("topology-filters");
  var interval = parseInt(el.dataset.intervalMs || "5000", 10);
  var jobBase = el.dataset.jobUrl || "/jobs/";
  var params = { zoom: el.dataset.zoom || "", team: el.dataset.team || "", flavor: el.dataset.flavor || "", job: el.dataset.job || "" };
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  var bound = false, busy = false, last = null;

  function query(extra) {
    var q = new URLSearchParams();
    Object.keys(params).forEach(function (k) { if (params[k]) q.set(k, params[k]); });
    Object.keys(extra || {}).forEach(function (k) { q.set(k, extra[k]); });
    var s = q.toString();
    return s ? "?" + s : "";
  }

  function setLinks() {
    var json = document.getElementById("topology-json"), csv = document.getElementById("topology-csv");
    if (json) json.href = el.dataset.url + query();
    if (csv) csv.href = el.dataset.url + query({ format: "csv" });
    if (form && window.history && window.history.replaceState) {
      window.history.replaceState(null, "", window.location.pathname + query());
    }
  }

  function crumb(label, zoom) {
    var b = document.createElement("button");
    b.type = "button"; b.className = "crumb"; b.textContent = label;
    b.addEventListener("click", function () { zoomTo(zoom); });
    return b;
  }

  function render(p) {
    if (!el.isConnected) return;  // removed by live.js (the job page's map once its job ended)
    last = p;
    Plotly.react(el, p.figure.data, p.figure.layout, config);
    el.dataset.level = p.level;
    el.dataset.gpus = p.gpus;
    var nav = document.getElementById("topology-path");
    if (nav) {
      nav.innerHTML = "";
      nav.appendChild(crumb("cluster", ""));
      p.path.forEach(function (d) { nav.appendChild(document.createTextNode(" › ")); nav.appendChild(crumb(d.name + " (tier " + d.tier + ")", d.name)); });
    }
    var totals = document.getElementById("topology-totals");
    if (totals) {
      var counts = Object.keys(p.totals).map(function (s) { return p.totals[s] + " " + s; }).join(" · ");
      // Filtered, these count the matching GPUs while the legend counts every GPU drawn: say which is which.
      totals.textContent = (p.filters.team || p.filters.job)
        ? p.shown_gpus + " of " + p.gpus + " GPUs match the filter: " + counts + " (the legend counts every GPU on the map)"
        : p.gpus + " GPUs shown · " + counts;
      // live, not a cycle's sample as the cluster page's cards (new-user trial 25, F7)
      if (p.moment) totals.textContent += " · " + p.moment;
    }
    if (!bound) {
      bound = true;
      el.on("plotly_click", function (ev) {
        var cd = ev.points && ev.points[0] && ev.points[0].customdata;
        if (Array.isArray(cd)) {
          if (cd[0]) { window.location.href = jobBase + cd[0] + "/"; } else if (cd[1] && cd[1] !== params.zoom) { zoomTo(cd[1]); }
        } else if (cd) { zoomTo(cd); }
      });
      el.on("plotly_clickannotation", function (ev) {
        var name = ev.annotation && ev.annotation.name;
        if (name && name !== params.zoom) zoomTo(name);
      });
    }
  }

  function load() {
    if (busy) return;
    busy = true;
    setLinks();
    fetch(el.dataset.url + query(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("topology.json answered " + r.status); return r.json(); })
      .then(render)
      .catch(function (err) {
        var totals = document.getElementById("topology-totals");
        if (totals) totals.textContent = String(err.message || err);
      })
      .then(function () { busy = false; });
  }

  function zoomTo(name) {
    params.zoom = name || "";
    var sel = document.getElementById("f-zoom");
    if (sel) {
      // a node without a domain ("node:<name>") is zoomable but not listed: add it, so "Show" keeps the zoom
      var listed = Array.prototype.some.call(sel.options, function (o) { return o.value === params.zoom; });
      if (!listed) { var o = document.createElement("option"); o.value = o.textContent = params.zoom; sel.appendChild(o); }
      sel.value = params.zoom;
    }
    load();
  }

  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      ["zoom", "team", "flavor", "job"].forEach(function (k) { var f = form.elements[k]; if (f) params[k] = f.value; });
      load();
    });
    var out = document.getElementById("zoom-out");
    if (out) out.addEventListener("click", function () {
      var path = (last && last.path) || [];
      zoomTo(path.length > 1 ? path[path.length - 2].name : "");
    });
  }
  load();
  // Polling stops when the map is gone: live.js removes the job page's map once the job ended (as a reload shows).
  var timer = setInterval(function () {
    if (!el.isConnected) { clearInterval(timer); return; }
    if (!document.hidden) load();
  }, interval);
})();
