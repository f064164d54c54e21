// Live updates shared by the pages: fetch a JSON URL every `interval` ms while the page is visible, one
// request at a time, and hand the payload to `onData`; on an error keep the last good view and try again.
// `url` is a string, or a function called before each request (to send, say, the next offset). Optional
// `onError(error)` hears each failed request. Returns {stop: ends the loop, now: fetch at once (skipped
// while a request is in flight)}. Each URL's last ETag is sent back as If-None-Match: a 304 (nothing changed)
// costs no body and leaves the view as it is.
window.gpuplatformPoll = function (url, interval, onData, onError) {
  "use strict";
  var busy = false, stopped = false, etags = {};
  function tick() {
    if (busy || stopped || document.hidden) return;
    busy = true;
    var target = typeof url === "function" ? url() : url;
    var headers = { Accept: "application/json" };
    if (etags[target]) headers["If-None-Match"] = etags[target];
    fetch(target, { credentials: "same-origin", headers: headers, cache: "no-store" })
      .then(function (r) {
        if (r.status === 304) return null;  // unchanged since the last poll
        if (!r.ok) throw new Error("HTTP " + r.status);
        var tag = r.headers.get("ETag");
        if (tag) etags[target] = tag;
        return r.json();
      })
      .then(function (payload) { if (payload !== null && !stopped) onData(payload); })
      .catch(function (err) { if (!stopped && onError) onError(err); /* keep the last good view; try again next tick */ })
      .then(function () { busy = false; });
  }
  var timer = setInterval(tick, interval);
  return {
    stop: function () { stopped = true; clearInterval(timer); },
    now: tick,
  };
};

// Forms marked data-confirm="question" ask before submitting (no inline handlers: the CSP forbids them).
document.addEventListener("submit", function (event) {
  "use strict";
  var form = event.target;
  if (form && form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

// A <select data-autosubmit> submits its form when changed (no inline handlers: the Content Security Policy
// refuses them; without JavaScript the form's <noscript> button does it).
document.addEventListener("change", function (ev) {
  var el = ev.target;
  if (el && el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.submit();
});

// `?since=` polling (frontend/delta.py): the page keeps the `cursor` of the last answer and asks only for
// newer points; the time-series figures of such an answer are {extend: {x, y}, names, points}.
window.gpuplatformSince = function (base, initialFigures) {
  "use strict";
  var cursor = null;
  var iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d/;
  Object.keys(initialFigures || {}).forEach(function (key) {  // the newest time the page was drawn with
    ((initialFigures[key] || {}).data || []).forEach(function (t) {
      var last = t.x && t.x.length ? t.x[t.x.length - 1] : null;
      if (typeof last === "string" && iso.test(last) && (cursor === null || last > cursor)) cursor = last;
    });
  });
  return {
    url: function () {
      if (!cursor) return base;
      return base + (base.indexOf("?") >= 0 ? "&" : "?") + "since=" + encodeURIComponent(cursor);
    },
    set: function (value) { cursor = value || null; },
    reset: function () { cursor = null; },
  };
};

// Draw one polled figure into `el`: a whole figure with Plotly.react; a `since` answer's new points with
// Plotly.extendTraces (keeping the figure's window of `points`). Returns false when the new points do not
// fit what is drawn (other traces: a queue appeared): the caller asks for everything next time.
// A figure with no data yet carries `empty` (its sentence, frontend/figures.py: with_empty_state): that note is
// shown instead of plotly's empty axes (a made-up "Jan 2000" date axis); new points for such a chart ask for the
// whole figure. Every polled page's charts (cluster, dashboards) are drawn here.
window.gpuplatformApplyFigure = function (el, fig, config) {
  "use strict";
  if (fig.empty) {
    if (el.dataset.empty !== fig.empty) {
      if (typeof Plotly !== "undefined") Plotly.purge(el);
      el.innerHTML = "";
      var note = document.createElement("p");
      note.className = "empty-state muted";
      note.textContent = fig.empty;
      el.appendChild(note);
      el.dataset.empty = fig.empty;
    }
    return true;
  }
  if (el.dataset.empty) {
    if (fig.extend) return false;  // new points for a chart that shows its empty state: ask for the whole figure
    el.innerHTML = "";
    delete el.dataset.empty;
  }
  if (!fig.extend) { Plotly.react(el, fig.data, fig.layout, config); return true; }
  var drawn = el.data || [];
  if (drawn.length !== fig.names.length) return false;
  for (var i = 0; i < drawn.length; i++) if (drawn[i].name !== fig.names[i]) return false;
  var fresh = fig.extend.x.some(function (x) { return x.length > 0; });
  if (fresh) Plotly.extendTraces(el, { x: fig.extend.x, y: fig.extend.y }, drawn.map(function (_, k) { return k; }), fig.points);
  return true;
};
