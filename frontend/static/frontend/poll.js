// Live updates shared by the pages: fetch a JSON URL every `interval` ms while the page is visible, one
// request at a time, and hand the payload to `onData`; on an error keep the last good view and try again.
window.gpuplatformPoll = function (url, interval, onData) {
  "use strict";
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(onData)
      .catch(function () { /* keep the last good view; try again next tick */ })
      .then(function () { busy = false; });
  }, interval);
};
