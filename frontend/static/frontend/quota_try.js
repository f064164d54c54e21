// Queues page, admins: try a quota change before saving it. POSTs a what-if to /api/v1/forecast/ (nothing is
// written) and shows, per team queue, the mean expected wait as things are and with the change.
(function () {
  "use strict";
  var form = document.getElementById("quota-try-form");
  if (!form) return;
  var out = document.getElementById("quota-try-status");
  var table = document.getElementById("quota-try-result");
  // Each try is numbered: an answer is shown only while it is the latest try's and the form still says what was
  // tried. An earlier, slower answer arriving after a later try, or an answer left on screen after the form was
  // edited (or after a failed try), showed a stale forecast as the answer to the change now in the form
  // (new-user trial 10, F15).
  var tries = 0;

  function clear(message) {
    table.hidden = true;
    table.querySelector("tbody").textContent = "";
    out.textContent = message;
  }

  function edited() {
    tries += 1;  // an answer still on its way is for the old values: dropped when it comes
    if (!table.hidden || out.textContent) clear("The change was edited: press Try it for its forecast.");
  }
  form.addEventListener("input", edited);
  form.addEventListener("change", edited);

  function words(s) {
    if (s === null || s === undefined) return "—";
    var sign = s < 0 ? "−" : "", m = Math.round(Math.abs(s) / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d) return sign + d + " d " + (h % 24) + " h";
    if (h) return sign + h + " h " + (m % 60) + " m";
    return sign + m + " m";
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var change = {kind: "set_quota", queue: form.queue.value, flavor: form.flavor.value}, bad = [];
    ["guarantee", "quota", "limit"].forEach(function (k) {
      var v = form[k].value.trim();
      // A browser gives "" for text it cannot read as a number ("abc"): badInput tells the two apart.
      if (form[k].validity && form[k].validity.badInput) v = "?";
      if (v === "") return;
      if (/^-?\d+$/.test(v)) change[k] = parseInt(v, 10);
      else bad.push(k + ": must be a whole number of GPUs (or empty: unchanged)");
    });
    tries += 1;
    var mine = tries;
    if (bad.length) {
      clear("cannot try this: " + bad.join("; "));
      return;
    }
    clear("forecasting…");
    var what = change.queue + " " + change.flavor + ["guarantee", "quota", "limit"].filter(function (k) {
      return k in change; }).map(function (k) { return ", " + k + " " + change[k]; }).join("");
    fetch(form.dataset.url, {method: "POST", credentials: "same-origin",
                             headers: {"Content-Type": "application/json",
                                       "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value},
                             body: JSON.stringify({changes: [change]})})
      .then(function (r) { return r.json().then(function (d) { return {ok: r.ok, d: d}; }); })
      .then(function (res) {
        if (mine !== tries) return;  // a later try, or an edit, came since: this answer is stale
        if (!res.ok) {
          // the API names a change's field "changes[0].quota": the form calls it "quota"
          clear("cannot try this: " + Object.keys(res.d).map(function (k) {
            return k.replace(/^changes\[0\]\./, "") + ": " + [].concat(res.d[k]).join(" "); }).join("; "));
          return;
        }
        var body = table.querySelector("tbody");
        body.textContent = "";
        res.d.queues.forEach(function (q) {
          var tr = document.createElement("tr");
          // Jobs that do not start within the forecast's horizon in a case are counted and named, not left out
          // of the table (a drain of every node read "0 jobs": new-user trial 19, F6).
          function never(n) { return n ? " (" + n + " not within the horizon)" : ""; }
          [q.queue, String(q.jobs) + (q.hypothetical ? " (" + q.hypothetical + " new)" : ""),
           words(q.mean_wait_before_s) + never(q.no_start_before), words(q.mean_wait_after_s) + never(q.no_start_after),
           words(q.change_s)].forEach(function (v, i) {
            var td = document.createElement(i ? "td" : "th");
            if (i) td.className = "num"; else td.scope = "row";
            td.textContent = v;
            tr.appendChild(td);
          });
          body.appendChild(tr);
        });
        table.hidden = false;
        var ev = res.d.evictions.length;
        out.textContent = "Forecast of " + what + " from the cluster at " + res.d.now + ": " + ev + " eviction" +
          (ev === 1 ? "" : "s") + " the change would cause. Nothing was saved.";
      })
      .catch(function () { if (mine === tries) clear("no answer from the server"); });
  });
})();
