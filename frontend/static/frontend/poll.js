// Live updates shared by the pages: fetch a JSON URL every `interval` ms while the page is visible, one
// request at a time, and hand the payload to `onData`; on an error keep the last good view and try again.
// `url` is a string, or a function called before each request (to send, say, the next offset). Optional
// `onError(error)` hears each failed request. Returns {stop: ends the loop, now: fetch at once (skipped
// while a request is in flight)}.
window.gpuplatformPoll = function (url, interval, onData, onError) {
  "use strict";
  var busy = false, stopped = false;
  function tick() {
    if (busy || stopped || document.hidden) return;
    busy = true;
    fetch(typeof url === "function" ? url() : url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (payload) { if (!stopped) onData(payload); })
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
