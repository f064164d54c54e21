// Live pages without a JSON twin (job detail, job list): every `data-live-interval-ms` the page fetches its
// own URL, and each element marked `data-live` (with an id) takes the fresh copy's content when it changed.
// Form fields being edited are never touched (only [data-live] regions are replaced, and those hold no
// inputs a user types into). Polling stops once the fresh page carries `data-live-done` (a finished job),
// pauses while the tab is hidden, and keeps the last good view on an error. An element marked
// `data-live-remove` (with an id; not replaced in place: the job page's map, drawn by topology.js) is removed
// once the fresh page no longer has it, as a reload would show (new-user trial 27: a cancelled job's map still
// read "preempting (1) · live: GPUs as they are now"). The "updated" stamp is UTC, 24-hour, as the other pages.
(function () {
  "use strict";
  var root = document.querySelector("[data-live-interval-ms]");
  if (!root) return;
  var interval = parseInt(root.dataset.liveIntervalMs, 10) || 5000;
  var busy = false, timer = null;
  // "2026-12-04 23:19:05 UTC": the server's "Y-m-d H:i:s" and the cluster clock's "... UTC" (cluster.js formatClock)
  function utc(d) { return d.toISOString().slice(0, 19).replace("T", " ") + " UTC"; }
  function apply(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var copy = el.id && fresh.getElementById(el.id);
      if (copy && copy.innerHTML !== el.innerHTML) {
        el.innerHTML = copy.innerHTML;
        el.dispatchEvent(new CustomEvent("live:updated", { bubbles: true }));
      }
    });
    if (fresh.querySelector("[data-live-interval-ms]")) {  // the same page (not, say, a login page)
      document.querySelectorAll("[data-live-remove]").forEach(function (el) {
        if (el.id && !fresh.getElementById(el.id)) {
          el.remove();
          document.dispatchEvent(new CustomEvent("live:removed", { detail: { id: el.id } }));
        }
      });
    }
    var stamp = document.getElementById("live-updated");
    if (stamp) stamp.textContent = "updated " + utc(new Date());
    if (fresh.querySelector("[data-live-done]") && timer) { clearInterval(timer); timer = null; }
  }
  function tick() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html", "X-Live": "1" }, cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
      .then(apply)
      .catch(function () { /* keep the last good view; try again next tick */ })
      .then(function () { busy = false; });
  }
  if (!document.querySelector("[data-live-done]")) timer = setInterval(tick, interval);
})();
