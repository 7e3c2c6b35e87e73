/* The Brokers page, live: every few seconds the cluster API says which brokers are alive or
 * fenced, which one is the controller and how many partitions each leads, and the table
 * follows without a reload; a broker that joined since the page was drawn reloads it. */
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("brokers-config").textContent);

  function text(el, value) {
    if (el && el.textContent !== value) el.textContent = value;
  }

  function show(cluster) {
    const rows = new Map();
    for (const row of document.querySelectorAll("#brokers tbody tr[data-broker-id]")) {
      rows.set(row.dataset.brokerId, row);
    }
    if (cluster.brokers.length !== rows.size || cluster.brokers.some((b) => !rows.has(String(b.id)))) {
      location.reload();
      return;
    }
    for (const b of cluster.brokers) {
      const row = rows.get(String(b.id));
      row.classList.toggle("fenced", b.fenced);
      text(row.querySelector('[data-field="status"]'), b.fenced ? "fenced" : "alive");
      row.querySelector(".controller-tag").hidden = !b.controller;
      text(row.querySelector('[data-field="partitions_led"]'), String(b.partitions_led));
      text(row.querySelector('[data-field="partition_count"]'), String(b.partition_count));
    }
    text(document.getElementById("controller-id"), String(cluster.controller_id));
    text(document.getElementById("brokers-alive"), String(cluster.brokers.filter((b) => !b.fenced).length));
    text(document.getElementById("brokers-refreshed"), "Updated " + new Date().toLocaleTimeString() + ".");
  }

  async function refresh() {
    try {
      const response = await fetch(config.api_url, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) show(await response.json());
    } catch (error) {
      // The control plane is restarting or the network blinked: the next round tries again.
    } finally {
      setTimeout(refresh, config.refresh_seconds * 1000);
    }
  }

  setTimeout(refresh, config.refresh_seconds * 1000);
})();
