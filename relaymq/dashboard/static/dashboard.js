// relaymq dashboard: asks before destructive actions, and keeps pages live from the
// dashboard's Server-Sent Events (/events): queue counts everywhere, a job's own events on
// its page. Plain script, no library.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    var button = e.target.closest("[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) e.preventDefault();
  });

  var body = document.body;
  var url = body.dataset.events;
  if (!url || !window.EventSource) return;
  var queue = body.dataset.queue, job = body.dataset.job;
  if (job) url += "?" + new URLSearchParams({ queue: queue, job: job }).toString();
  var live = document.getElementById("live");
  var source = new EventSource(url);
  source.onopen = function () { if (live) live.classList.add("on"); };
  source.onerror = function () { if (live) live.classList.remove("on"); };

  source.addEventListener("counts", function (message) {
    var d = JSON.parse(message.data);
    // data-count is "<queue>:<state>"; a queue name may hold ':' itself, a state never does
    document.querySelectorAll("[data-count]").forEach(function (el) {
      var key = el.getAttribute("data-count"), cut = key.lastIndexOf(":");
      if (key.slice(0, cut) === d.queue) el.textContent = String(d.counts[key.slice(cut + 1)] || 0);
    });
    document.querySelectorAll("[data-paused]").forEach(function (el) {
      if (el.getAttribute("data-paused") === d.queue) el.hidden = !d.paused;
    });
  });

  source.addEventListener("job", function (message) {
    var e = JSON.parse(message.data);
    var list = document.getElementById("job-events");
    if (list) {
      var item = document.createElement("li");
      var at = new Date(e.at * 1000).toLocaleTimeString();
      var data = Object.keys(e.data || {}).length ? " " + JSON.stringify(e.data) : "";
      item.textContent = at + " " + e.name + data;
      item.dataset.event = e.name;
      list.appendChild(item);
    }
    if (e.name === "job:progress") showProgress(e.data.progress);
    else refreshDetails();
  });

  function showProgress(value) {
    var section = document.getElementById("job-progress");
    if (!section) return;
    section.querySelector("pre").textContent = JSON.stringify(value, null, 2);
    section.hidden = false;
  }

  var refreshing = null;
  function refreshDetails() {  // the job changed: show its new record (one fetch at a time)
    if (refreshing) return;
    refreshing = fetch(window.location.pathname + window.location.search, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("job-details");
        var here = document.getElementById("job-details");
        if (fresh && here) here.innerHTML = fresh.innerHTML;
      })
      .finally(function () { refreshing = null; });
  }
})();
