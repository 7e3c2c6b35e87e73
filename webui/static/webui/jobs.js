// Keeps every job's progress on the page current: each unfinished job is polled through the
// REST API once a second until it finishes; a finished job's page reloads once to show its result.
(function () {
  "use strict";

  function render(el, job) {
    el.querySelector('[data-field="state"]').textContent = job.state;
    el.querySelector('[data-field="state"]').className = "job-state state-" + job.state;
    el.querySelector('[data-field="progress"]').value = job.progress;
    el.querySelector('[data-field="counts"]').textContent = job.done + " / " + job.total;
  }

  function watch(el) {
    const finishedBefore = el.dataset.finished === "true";
    if (finishedBefore) return;
    const timer = setInterval(async function () {
      let job;
      try {
        const response = await fetch(el.dataset.jobUrl, { headers: { Accept: "application/json" } });
        if (!response.ok) return;
        job = await response.json();
      } catch (e) {
        return; // a lost request: the next tick tries again
      }
      render(el, job);
      if (job.state === "succeeded" || job.state === "failed") {
        clearInterval(timer);
        el.dataset.finished = "true";
        if (document.querySelector('[data-field="finished_at"]')) window.location.reload();
      }
    }, 1000);
  }

  document.querySelectorAll("[data-job-url]").forEach(watch);
})();
