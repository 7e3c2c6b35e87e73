/* The Brokers page, live: every few seconds the cluster API says which brokers are alive or
 * fenced, which one is the controller and how many partitions each leads, and the table
 * follows without a reload; a broker that joined since the page was drawn, or one that went
 * down or came back (the latest metrics sample), reloads it. */
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

  async function get(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    return response.ok ? response.json() : null;
  }

  function urls(list) {
    return list.slice().sort().join(" ");
  }

  function downChanged(sample) {
    const drawn = Array.from(document.querySelectorAll("#brokers-down [data-down-url]"), (li) => li.dataset.downUrl);
    const down = (sample.endpoints || []).filter((e) => e.down_since).map((e) => e.url);
    return urls(drawn) !== urls(down);
  }

  async function refresh() {
    try {
      const [cluster, sample] = await Promise.all([get(config.api_url), get(config.metrics_url)]);
      if (sample && downChanged(sample)) {
        location.reload();
        return;
      }
      // With no broker answering the page has no table; the cluster's answer redraws it.
      if (cluster) show(cluster);
    } catch (error) {
      // The control plane is restarting or the network blinked: the next round tries again.
    } finally {
      setTimeout(refresh, config.refresh_seconds * 1000);
    }
  }

  setTimeout(refresh, config.refresh_seconds * 1000);
})();
