// Submission form: add / remove roles (a Django formset), keep the queue list to the chosen team, and
// check in the browser what HTML5 attributes cannot say (min available <= tasks), with clear messages.
// The server checks everything again (services.submit_job).
(function () {
  "use strict";
  var form = document.getElementById("job-form");
  if (!form) return;
  var total = form.querySelector('input[name="roles-TOTAL_FORMS"]');
  var maxForms = parseInt((form.querySelector('input[name="roles-MAX_NUM_FORMS"]') || {}).value || "16", 10);
  var roles = document.getElementById("roles");
  var template = document.getElementById("role-template");
  var queueTeams = JSON.parse(document.getElementById("queue-teams").textContent);

  function checkRole(role) {
    var tasks = role.querySelector('input[name$="-tasks"]'), min = role.querySelector('input[name$="-min_available"]');
    if (!tasks || !min) return;
    var t = parseInt(tasks.value, 10), m = parseInt(min.value, 10);
    min.setCustomValidity(!isNaN(t) && !isNaN(m) && m > t ? "Min available (" + m + ") must not exceed tasks (" + t + ")." : "");
  }

  document.getElementById("add-role").addEventListener("click", function () {
    var n = parseInt(total.value, 10);
    if (n >= maxForms) return;
    var html = template.innerHTML.replace(/__prefix__/g, String(n));
    roles.insertAdjacentHTML("beforeend", html);
    var added = roles.lastElementChild;
    var name = added.querySelector('input[name$="-name"]');
    if (name) { name.value = "role" + n; name.focus(); }
    total.value = String(n + 1);
  });
  document.getElementById("remove-role").addEventListener("click", function () {
    var n = parseInt(total.value, 10);
    if (n <= 1) return;
    roles.removeChild(roles.lastElementChild);
    total.value = String(n - 1);
  });
  roles.addEventListener("input", function (ev) {
    var role = ev.target.closest("[data-role]");
    if (role) checkRole(role);
  });

  var team = form.elements.team, queue = form.elements.queue;
  function filterQueues() {
    Array.prototype.forEach.call(queue.options, function (o) {
      o.hidden = !!(o.value && team.value && queueTeams[o.value] !== team.value);
    });
    if (queue.value && queueTeams[queue.value] !== team.value) {
      var first = Array.prototype.find.call(queue.options, function (o) { return o.value && !o.hidden; });
      queue.value = first ? first.value : "";
    }
  }
  if (team && queue) { team.addEventListener("change", filterQueues); filterQueues(); }

  form.addEventListener("submit", function (ev) {
    roles.querySelectorAll("[data-role]").forEach(checkRole);
    if (!form.checkValidity()) { ev.preventDefault(); form.reportValidity(); }
  });

  // "would start in about 2 h 10 m (90 %: 5 h)": the job as filled in so far, as a what-if (nothing is written)
  var estimateButton = document.getElementById("estimate-start");
  var estimateOut = document.getElementById("start-estimate");
  var pending = null;
  function estimate() {
    if (!estimateButton) return;
    var body = new FormData(form);
    estimateOut.textContent = "estimating…";
    fetch(estimateButton.dataset.url, {method: "POST", body: body, credentials: "same-origin",
                                      headers: {"X-CSRFToken": body.get("csrfmiddlewaretoken")}})
      .then(function (r) { return r.json().then(function (d) { return {ok: r.ok, d: d}; }); })
      .then(function (res) {
        if (res.ok) { estimateOut.textContent = res.d.text; return; }
        var errs = res.d.errors || {};
        estimateOut.textContent = "cannot estimate yet: " + Object.keys(errs).map(function (k) {
          return k.replace(/^roles-(\d+)-/, "role $1 ") + " " + errs[k]; }).join("; ");
      })
      .catch(function () { estimateOut.textContent = "no estimate (the server did not answer)"; });
  }
  if (estimateButton) {
    estimateButton.addEventListener("click", estimate);
    form.addEventListener("change", function () {  // refresh when the shape or queue changes, once readable
      var fields = form.querySelectorAll('select[name="queue"], input[name$="-tasks"], input[name$="-gpus_per_task"], ' +
                                         'input[name$="-min_available"], input[name="time_limit_minutes"]');
      var ready = Array.prototype.every.call(fields, function (f) {
        return f.checkValidity() && (f.value !== "" || !/queue|tasks|gpus_per_task$/.test(f.name) || /min_available/.test(f.name));
      });
      clearTimeout(pending);
      if (ready) pending = setTimeout(estimate, 600);
    });
  }
})();
