/* A pipeline's page, live: the dashboards' websocket (/ws/dashboard/) pushes a metrics sample
 * about once a second, whose `pipelines` list carries every active run's figures (Spark's last
 * progress); this pipeline's go into the charts and the facts. The socket reconnects with
 * exponential backoff; closed for lack of login or role it stops. */
(function () {
  "use strict";

  const { LineChart, formatNumber } = window.FjordCharts;
  const config = JSON.parse(document.getElementById("pipeline-config").textContent);
  const UNAUTHENTICATED = 4401;
  const FORBIDDEN = 4403;
  const renderedAt = Date.parse(config.rendered_at);
  const ACTIVE = ["starting", "running", "stopping"];
  const rows = new LineChart(document.getElementById("chart-pipeline-rows"), {
    windowSeconds: config.window_seconds,
    series: [
      { key: "input_rows_per_second", label: "input/s", color: "#1e7b3a" },
      { key: "processed_rows_per_second", label: "processed/s", color: "#1f5f8b" },
    ],
  });
  const batches = new LineChart(document.getElementById("chart-pipeline-batches"), {
    windowSeconds: config.window_seconds,
    series: [
      { key: "batch_duration_ms", label: "batch (ms)", color: "#1f5f8b" },
      { key: "lag", label: "lag", color: "#b3261e" },
    ],
  });

  function show(id, value) {
    const el = document.getElementById(id);
    if (el && el.textContent !== value) el.textContent = value;
  }

  function showStatus(value) {
    show("pipeline-status", value);
    document.getElementById("pipeline-status").className = "job-state state-" + value;
  }

  // A run that ended is in no sample any more: its final status comes from the REST API.
  async function fetchStatus() {
    try {
      const response = await fetch(config.api_url, { headers: { Accept: "application/json" } });
      if (response.ok) showStatus((await response.json()).status);
    } catch (e) {
      // a lost request: the next sample tries again
    }
  }

  function onSample(data) {
    const mine = (data.pipelines || []).find((p) => p.pipeline === config.pipeline);
    const time = Date.parse(data.taken_at);
    if (time < renderedAt) return;
    if (!mine) {
      if (ACTIVE.includes(document.getElementById("pipeline-status").textContent)) fetchStatus();
      return;
    }
    rows.push(time, mine);
    batches.push(time, mine);
    showStatus(mine.status);
    show("pipeline-batches", formatNumber(mine.batches));
    show("pipeline-rows-in", String(mine.rows_in));
    show("pipeline-lag", String(mine.lag));
  }

  let delay = 1000;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + config.websocket_path);
    socket.onopen = () => {
      delay = 1000;
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "sample") onSample(message.data);
    };
    socket.onclose = (event) => {
      if (event.code === UNAUTHENTICATED || event.code === FORBIDDEN) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
