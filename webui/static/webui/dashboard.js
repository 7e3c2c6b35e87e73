/* The live dashboard: history from the metrics API first, then every sample the websocket
 * /ws/dashboard/ pushes (about one a second), into the stats, the tables and the charts.
 * The socket reconnects with exponential backoff; closed for lack of login it stops. */
(function () {
  "use strict";

  const { LineChart, BarChart, formatNumber, formatBytes, formatSeconds } = window.FjordCharts;
  const config = JSON.parse(document.getElementById("dashboard-config").textContent);
  const UNAUTHENTICATED = 4401;
  const FORBIDDEN = 4403;
  const COLORS = { blue: "#1f5f8b", green: "#1e7b3a", red: "#b3261e", amber: "#b7791f", grey: "#7a8794" };
  const FORMATS = { bytes: formatBytes, seconds: formatSeconds, rate: formatNumber };

  const window_ = config.window_seconds;
  const lines = {
    replication: new LineChart(document.getElementById("chart-replication"), {
      windowSeconds: window_,
      series: [
        { key: "under_replicated_partitions", label: "under-repl.", color: COLORS.amber },
        { key: "offline_partitions", label: "offline", color: COLORS.red },
        { key: "isr_shrinks_per_second", label: "shrinks/s", color: COLORS.grey },
        { key: "isr_expands_per_second", label: "expands/s", color: COLORS.green },
      ],
    }),
    producers: new LineChart(document.getElementById("chart-producers"), {
      windowSeconds: window_,
      series: [
        { key: "producer_ids_live", label: "producer ids", color: COLORS.blue },
        { key: "transactional_ids_active", label: "txn ids", color: COLORS.grey },
      ],
    }),
    transactions: new LineChart(document.getElementById("chart-transactions"), {
      windowSeconds: window_,
      series: [
        { key: "transactions_ongoing", label: "ongoing", color: COLORS.blue },
        { key: "transactions_oldest_age_seconds", label: "oldest (s)", color: COLORS.red },
        { key: "partitions_behind", label: "LSO<HW", color: COLORS.amber },
      ],
    }),
    fetchSessions: new LineChart(document.getElementById("chart-fetch-sessions"), {
      windowSeconds: window_,
      series: [
        { key: "fetch_sessions_incremental", label: "sessions", color: COLORS.grey },
        { key: "fetch_session_partitions_cached", label: "cached", color: COLORS.blue },
        { key: "fetch_session_evictions_per_second", label: "evictions/s", color: COLORS.red },
      ],
    }),
    throughput: new LineChart(document.getElementById("chart-throughput"), {
      windowSeconds: window_,
      format: formatBytes,
      series: [
        { key: "bytes_in_per_second", label: "in/s", color: COLORS.green },
        { key: "bytes_out_per_second", label: "out/s", color: COLORS.blue },
      ],
    }),
    requests: new LineChart(document.getElementById("chart-requests"), {
      windowSeconds: window_,
      series: [{ key: "requests_per_second", label: "requests/s", color: COLORS.blue }],
    }),
  };
  const offsets = new BarChart(document.getElementById("chart-offsets"), {
    maxCategories: 40,
    series: [
      { key: "high_watermark", label: "high watermark", color: COLORS.blue },
      { key: "last_stable_offset", label: "last stable offset", color: COLORS.amber },
    ],
  });
  const historyFields = [...new Set(Object.values(lines).flatMap((c) => c.series.map((s) => s.key)))];

  function text(el, value) {
    if (el.textContent !== value) el.textContent = value;
  }

  function cell(row, cls, value) {
    let td = row.querySelector("td." + cls);
    if (!td) {
      td = document.createElement("td");
      td.className = cls;
      row.appendChild(td);
    }
    text(td, String(value));
    return td;
  }

  function updateStats(data) {
    for (const el of document.querySelectorAll("[data-field]")) {
      const format = FORMATS[el.dataset.format] || formatNumber;
      text(el, format(data[el.dataset.field]));
      // Partitions short of replicas or of a leader: any at all is worth the colour.
      if (el.hasAttribute("data-alert")) el.parentElement.classList.toggle("alert", data[el.dataset.field] > 0);
    }
  }

  /* Rows are kept (keyed by topic and partition) so the table does not flicker. */
  function updatePartitions(partitions) {
    const body = document.querySelector("#partitions tbody");
    const filter = document.getElementById("partition-filter").value.trim().toLowerCase();
    const existing = new Map();
    for (const row of body.querySelectorAll("tr[data-topic]")) {
      existing.set(row.dataset.topic + "\u0000" + row.dataset.partition, row);
    }
    const empty = body.querySelector("tr.empty");
    if (empty) empty.remove();
    const wanted = new Set();
    let previous = null;
    for (const p of partitions) {
      const key = p.topic + "\u0000" + p.partition;
      wanted.add(key);
      let row = existing.get(key);
      if (!row) {
        row = document.createElement("tr");
        row.dataset.topic = p.topic;
        row.dataset.partition = String(p.partition);
        cell(row, "topic", p.topic);
        cell(row, "partition", p.partition);
        cell(row, "log-start", "");
        cell(row, "lso", "");
        cell(row, "hw", "");
        cell(row, "unstable", "");
        const bar = document.createElement("td");
        bar.className = "bar-col";
        bar.innerHTML = '<span class="offset-bar"><span class="offset-bar-lso"></span></span>';
        row.appendChild(bar);
      }
      if (previous ? previous.nextSibling !== row : body.firstChild !== row) {
        body.insertBefore(row, previous ? previous.nextSibling : body.firstChild);
      }
      previous = row;
      fillPartition(row, p, filter);
    }
    for (const [key, row] of existing) if (!wanted.has(key)) row.remove();
    if (!partitions.length) {
      body.innerHTML = '<tr class="empty"><td colspan="7">No partitions sampled yet.</td></tr>';
    }
  }

  function fillPartition(row, p, filter) {
    const unstable = p.high_watermark - p.last_stable_offset;
    cell(row, "log-start", p.log_start_offset);
    cell(row, "lso", p.last_stable_offset);
    cell(row, "hw", p.high_watermark);
    cell(row, "unstable", unstable > 0 ? unstable : "");
    row.classList.toggle("behind", unstable > 0);
    row.hidden = Boolean(filter) && !p.topic.toLowerCase().includes(filter);
    const share = p.high_watermark > 0 ? (100 * p.last_stable_offset) / p.high_watermark : 100;
    const bar = row.querySelector(".offset-bar-lso");
    if (bar) bar.style.width = share.toFixed(1) + "%";
  }

  function updateOffsetsChart(partitions) {
    // Partitions behind first (they are what the chart is for), then the busiest.
    const shown = partitions
      .slice()
      .sort(
        (a, b) =>
          b.high_watermark - b.last_stable_offset - (a.high_watermark - a.last_stable_offset) ||
          b.high_watermark - a.high_watermark
      );
    offsets.setData(
      shown.map((p) => p.topic + "-" + p.partition),
      {
        high_watermark: shown.map((p) => p.high_watermark),
        last_stable_offset: shown.map((p) => p.last_stable_offset),
      },
      shown.map((p) => p.last_stable_offset < p.high_watermark)
    );
  }

  function updateTransactions(transactions) {
    const body = document.querySelector("#transactions tbody");
    body.textContent = "";
    if (!transactions.length) {
      body.innerHTML = '<tr class="empty"><td colspan="6">No transaction is open.</td></tr>';
      return;
    }
    for (const t of transactions) {
      const row = document.createElement("tr");
      row.dataset.transactionalId = t.transactional_id;
      if (t.hanging) row.className = "hanging";
      cell(row, "id", t.transactional_id);
      cell(row, "producer-id", t.producer_id);
      cell(row, "epoch", t.producer_epoch);
      cell(row, "age", formatSeconds(t.age_seconds));
      cell(row, "timeout", t.timeout_ms + " ms");
      cell(row, "partitions", t.partitions.map((p) => p.topic + "-" + p.partition).join(", "));
      body.appendChild(row);
    }
  }

  function updateRequests(requests) {
    const body = document.querySelector("#requests tbody");
    body.textContent = "";
    const apis = Object.keys(requests || {}).sort(
      (a, b) => (requests[b].requests_per_second || 0) - (requests[a].requests_per_second || 0)
    );
    for (const api of apis) {
      const r = requests[api];
      const row = document.createElement("tr");
      row.dataset.api = api;
      cell(row, "api", api);
      cell(row, "rate", formatNumber(r.requests_per_second));
      cell(row, "latency", r.latency_ms === null ? "–" : r.latency_ms.toFixed(2) + " ms");
      cell(row, "in", formatBytes(r.bytes_in_per_second));
      cell(row, "out", formatBytes(r.bytes_out_per_second));
      cell(row, "total", r.requests_total);
      body.appendChild(row);
    }
    if (!apis.length) body.innerHTML = '<tr class="empty"><td colspan="6">No requests sampled yet.</td></tr>';
  }

  /* Each broker's own figures: n/a where its endpoint lacks them (an older broker, or one down). */
  const orNa = (format) => (value) => (value === null || value === undefined ? "n/a" : format(value));
  const ms = orNa((value) => formatNumber(value) + " ms");
  const count = orNa(formatNumber);

  function updateEventLoop(endpoints) {
    const body = document.querySelector("#event-loop tbody");
    body.textContent = "";
    for (const e of endpoints) {
      const row = document.createElement("tr");
      row.dataset.url = e.url;
      cell(row, "id", e.url);
      cell(row, "lag-max", ms(e.event_loop_lag_max_ms));
      cell(row, "lag-mean", ms(e.event_loop_lag_mean_ms));
      cell(row, "gen2", count(e.gc_gen2_collections_total));
      cell(row, "gen2-mean", ms(e.gc_gen2_pause_mean_ms));
      cell(row, "gen2-total", ms(e.gc_gen2_pause_time_ms_total));
      cell(row, "collections", count(e.gc_collections_total));
      cell(row, "frozen", count(e.gc_frozen_objects));
      body.appendChild(row);
    }
    if (!endpoints.length) body.innerHTML = '<tr class="empty"><td colspan="8">No broker sampled yet.</td></tr>';
  }

  /* A quota's measured rate in its own unit. */
  const QUOTA_UNITS = {
    produce: (v) => formatBytes(v) + "/s",
    fetch: (v) => formatBytes(v) + "/s",
    request: (v) => formatNumber(v) + " %",
    controller_mutation: (v) => formatNumber(v) + "/s",
  };

  function updateQuotas(quotas) {
    const body = document.querySelector("#quota-throttling tbody");
    body.textContent = "";
    for (const q of quotas) {
      const unit = QUOTA_UNITS[q.quota_type] || formatNumber;
      const row = document.createElement("tr");
      row.dataset.quotaType = q.quota_type;
      if (q.throttled_per_second) row.className = "throttled";
      const entity = [q.user && "user " + q.user, q.client_id && "client id " + q.client_id];
      cell(row, "id", entity.filter(Boolean).join(" · "));
      cell(row, "quota-type", q.quota_type);
      cell(row, "throttle", formatNumber(q.throttle_time_ms_per_second));
      cell(row, "mean-throttle", q.mean_throttle_ms === null ? "–" : q.mean_throttle_ms.toFixed(1) + " ms");
      cell(row, "throttled", formatNumber(q.throttled_per_second));
      cell(row, "rate", unit(q.rate));
      cell(row, "limit", q.limit === null ? "none" : unit(q.limit));
      cell(row, "usage", q.usage === null ? "–" : (100 * q.usage).toFixed(0) + " %");
      body.appendChild(row);
    }
    if (!quotas.length) body.innerHTML = '<tr class="empty"><td colspan="8">No client has used a quota yet.</td></tr>';
  }

  function show(data) {
    // A cluster whose brokers answer only in part is "partly reachable" (the title says which not);
    // a broker that stopped answering is down since the first sample that found it so.
    const status = document.getElementById("broker-status");
    const down = (data.endpoints || []).filter((e) => e.down_since);
    const since = down.map((e) => e.down_since).sort()[0];
    const sinceText = since ? " since " + new Date(since).toLocaleTimeString() : "";
    let state = "reachable";
    if (data.broker === "partial") state = "partly reachable (" + down.length + " down" + sinceText + ")";
    else if (data.broker !== "up") state = since ? "down" + sinceText : "unreachable";
    text(status, state);
    status.className = "status status-" + (data.broker === "up" ? "reachable" : "unreachable");
    status.title = down.map((e) => e.url + " down since " + e.down_since).join("\n") || data.error || "";
    const last = document.getElementById("last-sample");
    last.dataset.takenAt = data.taken_at;
    last.dateTime = data.taken_at;
    text(last, new Date(data.taken_at).toLocaleTimeString());
    updateStats(data);
    updatePartitions(data.partitions || []);
    updateOffsetsChart(data.partitions || []);
    updateTransactions(data.transactions || []);
    updateRequests(data.requests || {});
    updateEventLoop(data.endpoints || []);
    updateQuotas(data.quotas || []);
    const time = Date.parse(data.taken_at);
    for (const chart of Object.values(lines)) chart.push(time, data);
  }

  function setSocketState(state) {
    const el = document.getElementById("ws-status");
    el.dataset.state = state;
    text(el, state);
  }

  let delay = 1000;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + config.websocket_path);
    setSocketState("connecting");
    socket.onopen = () => {
      delay = 1000;
      setSocketState("live");
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "sample") show(message.data);
    };
    socket.onclose = (event) => {
      if (event.code === UNAUTHENTICATED || event.code === FORBIDDEN) {
        setSocketState(event.code === UNAUTHENTICATED ? "logged out" : "forbidden");
        return;
      }
      setSocketState("reconnecting");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }

  async function loadHistory() {
    const url = new URL(config.history_url, location.href);
    url.searchParams.set("fields", historyFields.join(","));
    url.searchParams.set("since", new Date(Date.now() - window_ * 1000).toISOString());
    url.searchParams.set("points", "600");
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const history = await response.json();
    const times = history.taken_at.map((t) => Date.parse(t));
    for (const chart of Object.values(lines)) chart.setData(times, history.series);
  }

  document.getElementById("partition-filter").addEventListener("input", () => {
    const filter = document.getElementById("partition-filter").value.trim().toLowerCase();
    for (const row of document.querySelectorAll("#partitions tbody tr[data-topic]")) {
      row.hidden = Boolean(filter) && !row.dataset.topic.toLowerCase().includes(filter);
    }
  });

  for (const chart of Object.values(lines)) chart.draw();
  if (config.initial) show(config.initial);
  else offsets.draw();
  // History first, so that live samples append to it rather than being replaced by it.
  loadHistory()
    .catch(() => undefined)
    .finally(connect);
})();
