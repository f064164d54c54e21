// The job page's log view: one task's combined stdout/stderr from GET <data-url>?task=<id>&offset=<bytes>
// &limit=<bytes> (answer: {task, name, attempt, offset, next_offset, size, trimmed, data, complete}; offsets
// and sizes in bytes of the task attempt's output). It starts at the last TAIL bytes, then asks every
// data-interval-ms for what came after `next_offset` and appends it as text (never parsed as HTML); it stops
// once the task has ended and everything up to `size` is shown. A new attempt (a restarted gang) starts a
// fresh view of that attempt. Polling is poll.js's.
// Diagnosis evidence (json_script #log-highlight: {attempt, task, lines: [{task, text}]}): the view opens on
// the diagnosed task's attempt and wraps each evidence line in <mark class="evidence"> (as text nodes, never
// HTML); a link with data-log-task and data-log-attempt shows that task's attempt.
(function () {
  "use strict";
  var out = document.getElementById("log-output");
  if (!out || !window.gpuplatformPoll) return;
  var select = document.getElementById("log-task");
  var status = document.getElementById("log-status");
  var note = document.getElementById("log-trimmed");
  var url = out.getAttribute("data-url");
  var interval = parseInt(out.getAttribute("data-interval-ms") || "2000", 10);
  var TAIL = 65536;             // bytes: where the view starts, and the most asked for per request
  var MAX_CHARS = 2 * 1048576;  // the view drops its oldest text beyond this
  var poller = null, task = null, offset = null, attempt = null, chars = 0, skipped = false, serverTrimmed = false;
  var pinned = null;  // an attempt asked for explicitly (the diagnosis' evidence), else the latest
  var hlNode = document.getElementById("log-highlight");
  var highlight = hlNode ? JSON.parse(hlNode.textContent) : null;

  function setStatus(text) { status.textContent = text; }
  function showNote() {
    var parts = [];
    if (serverTrimmed) parts.push("(older output trimmed)");
    if (skipped) parts.push("(showing the end of the output; earlier output: gpuctl logs)");
    note.textContent = parts.join(" ");
    note.hidden = parts.length === 0;
  }
  function clear() {
    while (out.firstChild) out.removeChild(out.firstChild);
    chars = 0; skipped = false; serverTrimmed = false; showNote();
  }
  function evidenceFor() {
    if (!highlight || pinned === null || pinned !== highlight.attempt) return [];
    return highlight.lines.filter(function (l) { return String(l.task) === String(task) && l.text; })
      .map(function (l) { return l.text; });
  }
  function appendPieces(text) {  // text nodes, with the evidence lines inside <mark class="evidence">
    var marks = evidenceFor(), rest = text;
    while (rest) {
      var best = -1, which = null;
      marks.forEach(function (m) { var i = rest.indexOf(m); if (i >= 0 && (best < 0 || i < best)) { best = i; which = m; } });
      if (best < 0) { out.appendChild(document.createTextNode(rest)); return; }
      if (best > 0) out.appendChild(document.createTextNode(rest.slice(0, best)));
      var mark = document.createElement("mark");
      mark.className = "evidence";
      mark.appendChild(document.createTextNode(which));
      out.appendChild(mark);
      rest = rest.slice(best + which.length);
    }
  }
  function append(text) {
    if (!text) return;
    var atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    appendPieces(text);
    chars += text.length;
    while (chars > MAX_CHARS && out.firstChild) {
      chars -= out.firstChild.textContent.length;
      out.removeChild(out.firstChild);
      skipped = true;
    }
    var first = out.querySelector("mark.evidence");
    if (first && !out.getAttribute("data-scrolled")) {  // bring the first evidence line into view, once
      out.setAttribute("data-scrolled", "1");
      out.scrollTop = Math.max(0, first.offsetTop - out.offsetTop - 40);
    } else if (atBottom) out.scrollTop = out.scrollHeight;
  }
  function requestUrl() {
    var q = "?task=" + encodeURIComponent(task) + "&limit=" + TAIL;
    if (pinned !== null) q += "&attempt=" + pinned;
    if (offset !== null) q += "&offset=" + offset;
    return url + q;
  }
  function soon() { setTimeout(function () { if (poller) poller.now(); }, 50); }
  function kib(bytes) { return bytes < 1024 ? bytes + " B" : (bytes / 1024).toFixed(1) + " KiB"; }

  function onData(p) {
    if (String(p.task) !== String(task)) return;  // an answer for a task no longer shown
    if (pinned === null && attempt !== null && p.attempt !== attempt) {  // restarted: show the new attempt from its start
      clear(); offset = null; attempt = p.attempt; soon(); return;
    }
    attempt = p.attempt;
    if (p.trimmed) serverTrimmed = true;
    if (offset === null && p.size - TAIL > p.next_offset) {  // first answer of a long log: jump to its last TAIL bytes
      offset = p.size - TAIL; skipped = true; showNote(); soon(); return;
    }
    append(p.data);
    var moved = offset === null || p.next_offset > offset;
    offset = p.next_offset;
    showNote();
    var done = p.complete && p.next_offset >= p.size;
    var every = ", checking every " + interval / 1000 + " s";
    var waiting = !p.complete && !p.size && (p.state === "pending" || p.state === "bound");  // not started yet
    setStatus((p.name || "task") + " · attempt " + p.attempt + " · " + kib(p.size) +
              (done ? " · ended, output complete" : p.complete ? " · ended, fetching the rest"
               : waiting ? " · no log yet: the task is " + (p.state === "pending" ? "pending (not placed yet)" : "starting") + every
               : " · running, updating every " + interval / 1000 + " s"));
    if (done) { poller.stop(); poller = null; return; }
    if (moved && p.next_offset < p.size) soon();  // more is there already: catch up
  }
  function onError(err) { setStatus("log unavailable (" + err.message + "); retrying"); }

  function show(id, pin) {
    if (poller) poller.stop();
    task = id; offset = null; attempt = null; pinned = (pin === undefined || pin === null) ? null : pin;
    clear();
    out.removeAttribute("data-scrolled");
    setStatus("loading…");
    poller = window.gpuplatformPoll(requestUrl, interval, onData, onError);
    poller.now();
  }

  select.addEventListener("change", function () { show(select.value); });
  // Delegated: the tasks table is replaced in place by live.js while the job runs.
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("[data-log-task]");
    if (!a) return;
    select.value = a.getAttribute("data-log-task");
    var pin = a.getAttribute("data-log-attempt");
    show(select.value, pin === null ? null : parseInt(pin, 10));
  });
  if (highlight && highlight.task) {  // a failed attempt: open on its decisive task and line
    select.value = String(highlight.task);
    show(select.value, highlight.attempt);
  } else if (select.value) show(select.value);
})();
