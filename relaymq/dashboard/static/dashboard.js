// relaymq dashboard: asks before destructive actions, and keeps pages live from the
// dashboard's Server-Sent Events (/events): queue counts everywhere, a job's own events on
// its page, the progress of a queue's jobs on the queue's page. Plain script, no library.
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
  else if (queue) url += "?" + new URLSearchParams({ queue: queue }).toString();  // progress
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
    if (!job) {  // a queue page: only its jobs' progress comes here
      if (e.name === "job:progress") moveBars(e.job_id, e.data.progress);
      return;
    }
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

  // The newest progress an event brought: the stored one lags behind it (a worker stores
  // progress with its next heartbeat), so a refreshed record must not turn the bar back.
  var lastProgress;

  function showProgress(value) {
    lastProgress = value;
    var section = document.getElementById("job-progress");
    if (!section) return;
    var pre = section.querySelector("pre");
    pre.textContent = JSON.stringify(value, null, 2);
    pre.hidden = drawBar(section, value);
    section.hidden = false;
  }

  // A progress value as a bar: {percent: 0-100} or {current, total}, with its message (or
  // step) beside it; false (bar hidden) for anything else. relaymq.dashboard.views.progress_bar
  // decides the same on the server.
  function barOf(value) {
    if (!value || typeof value !== "object") return null;
    var number = function (x) { return typeof x === "number" && isFinite(x); };
    var fraction, label;
    if (number(value.percent)) {
      fraction = value.percent / 100;
      label = Math.round(value.percent) + "%";
    } else if (number(value.current) && number(value.total) && value.total > 0) {
      fraction = value.current / value.total;
      label = value.current + " of " + value.total;
    } else return null;
    var note = value.message !== undefined ? value.message : value.step;
    var percent = Math.round(Math.max(0, Math.min(1, fraction)) * 1000) / 10;
    return { percent: percent, label: label, note: note === undefined ? "" : String(note) };
  }

  function drawBar(holder, value) {
    var el = holder.querySelector(".progress"), bar = barOf(value);
    if (!el) return false;
    el.hidden = !bar;
    if (!bar) return false;
    el.querySelector("progress").value = bar.percent;
    el.querySelector(".label").textContent = bar.label;
    el.querySelector(".progress-note").textContent = bar.note;
    return true;
  }

  function moveBars(jobId, value) {
    document.querySelectorAll("[data-progress-of]").forEach(function (cell) {
      if (cell.getAttribute("data-progress-of") !== jobId) return;
      var text = cell.querySelector(".progress-json");
      var drawn = drawBar(cell, value);
      if (text) {
        text.textContent = drawn ? "" : JSON.stringify(value);
        text.hidden = drawn;
      }
    });
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
        if (lastProgress !== undefined) showProgress(lastProgress);
      })
      .finally(function () { refreshing = null; });
  }
})();
