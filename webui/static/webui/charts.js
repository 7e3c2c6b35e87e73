/* Small canvas charts for the Fjord dashboards: a time line chart and a grouped bar chart.
 * No library and no CDN: the console serves every asset itself. Both charts redraw on
 * demand (after new data) and when the window is resized. */
(function (global) {
  "use strict";

  const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  const AXIS = "#5b6773";
  const GRID = "#e3e8ed";
  const charts = new Set();

  function formatNumber(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const abs = Math.abs(value);
    if (abs >= 1e9) return (value / 1e9).toFixed(1) + "G";
    if (abs >= 1e6) return (value / 1e6).toFixed(1) + "M";
    if (abs >= 1e4) return (value / 1e3).toFixed(1) + "k";
    if (Number.isInteger(value)) return String(value);
    return abs >= 99.5 ? value.toFixed(0) : abs >= 0.995 ? value.toFixed(1) : value.toFixed(2);
  }

  function formatBytes(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (Math.abs(value) >= 1024 && i < units.length - 1) {
      value /= 1024;
      i += 1;
    }
    return (i === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[i];
  }

  function formatSeconds(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    if (value < 60) return value.toFixed(value < 10 ? 1 : 0) + " s";
    if (value < 3600) return Math.floor(value / 60) + " min " + Math.floor(value % 60) + " s";
    return (value / 3600).toFixed(1) + " h";
  }

  /* A "nice" top of an axis with four gridlines: four times 1, 2, 2.5 or 5 times a power
   * of ten, so every gridline's label is a round number. */
  function niceMax(value) {
    if (!(value > 0)) return 1;
    const raw = value / 4;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const step of [1, 2, 2.5, 5, 10]) {
      if (raw <= step * power) return 4 * step * power;
    }
    return 40 * power;
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  /* Sizes the canvas's backing store to its CSS box and the screen's pixel ratio. */
  function prepare(canvas) {
    const ratio = global.devicePixelRatio || 1;
    const width = canvas.clientWidth || 300;
    const height = canvas.clientHeight || 160;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    return { ctx, width, height };
  }

  function legend(ctx, series, x, y, valueOf) {
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    for (const s of series) {
      ctx.fillStyle = s.color;
      ctx.fillRect(x, y - 4, 10, 8);
      ctx.fillStyle = AXIS;
      const text = valueOf ? s.label + " " + valueOf(s) : s.label;
      ctx.fillText(text, x + 14, y);
      x += ctx.measureText(text).width + 28;
    }
  }

  function yAxis(ctx, area, max, format) {
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i <= 4; i += 1) {
      const value = (max * i) / 4;
      const y = area.bottom - ((area.bottom - area.top) * i) / 4;
      ctx.strokeStyle = GRID;
      ctx.beginPath();
      ctx.moveTo(area.left, y);
      ctx.lineTo(area.right, y);
      ctx.stroke();
      ctx.fillStyle = AXIS;
      ctx.fillText(format(value), area.left - 6, y);
    }
  }

  /* Values of several series over time, the last `windowSeconds` of them. */
  class LineChart {
    constructor(canvas, options) {
      this.canvas = canvas;
      this.series = options.series;
      this.format = options.format || formatNumber;
      this.windowMs = (options.windowSeconds || 600) * 1000;
      this.times = [];
      this.values = Object.fromEntries(this.series.map((s) => [s.key, []]));
      charts.add(this);
    }

    setData(times, valuesByKey) {
      this.times = times.slice();
      for (const s of this.series) this.values[s.key] = (valuesByKey[s.key] || []).slice();
      this.trim();
      this.draw();
    }

    push(time, valuesByKey) {
      // A sample seen already (the page's history overlaps the first pushed one) is skipped.
      if (this.times.length && time <= this.times[this.times.length - 1]) return;
      this.times.push(time);
      for (const s of this.series) {
        const v = valuesByKey[s.key];
        this.values[s.key].push(typeof v === "number" ? v : null);
      }
      this.trim();
      this.draw();
    }

    trim() {
      const newest = this.times[this.times.length - 1];
      let drop = 0;
      while (drop < this.times.length && this.times[drop] < newest - this.windowMs) drop += 1;
      if (drop) {
        this.times.splice(0, drop);
        for (const s of this.series) this.values[s.key].splice(0, drop);
      }
    }

    latest(key) {
      const values = this.values[key];
      for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
      return null;
    }

    draw() {
      const { ctx, width, height } = prepare(this.canvas);
      ctx.font = FONT;
      const labelWidth = ctx.measureText(this.format(this.maxValue())).width;
      const area = { left: Math.max(36, labelWidth + 12), right: width - 8, top: 24, bottom: height - 20 };
      const max = niceMax(this.maxValue());
      yAxis(ctx, area, max, this.format);
      legend(ctx, this.series, area.left, 10, (s) => this.format(this.latest(s.key)));
      if (this.times.length === 0) {
        ctx.fillStyle = AXIS;
        ctx.textAlign = "center";
        ctx.fillText("no samples yet", (area.left + area.right) / 2, (area.top + area.bottom) / 2);
        return;
      }
      const newest = this.times[this.times.length - 1];
      const oldest = Math.min(this.times[0], newest - 1000);
      const span = newest - oldest;
      const x = (t) => area.left + ((t - oldest) / span) * (area.right - area.left);
      const y = (v) => area.bottom - (v / max) * (area.bottom - area.top);
      ctx.fillStyle = AXIS;
      ctx.textBaseline = "top";
      ctx.textAlign = "left";
      ctx.fillText(clock(oldest), area.left, area.bottom + 4);
      ctx.textAlign = "right";
      ctx.fillText(clock(newest), area.right, area.bottom + 4);
      for (const s of this.series) {
        const values = this.values[s.key];
        ctx.strokeStyle = s.color;
        ctx.lineWidth = 2;
        ctx.beginPath();
        let drawing = false;
        for (let i = 0; i < values.length; i += 1) {
          if (values[i] === null) {
            drawing = false; // a gap: the broker was unreachable or rates were unknown
            continue;
          }
          if (drawing) ctx.lineTo(x(this.times[i]), y(values[i]));
          else ctx.moveTo(x(this.times[i]), y(values[i]));
          drawing = true;
        }
        ctx.stroke();
        ctx.lineWidth = 1;
      }
    }

    maxValue() {
      let max = 0;
      for (const s of this.series) for (const v of this.values[s.key]) if (v !== null && v > max) max = v;
      return max;
    }
  }

  /* Several values side by side per category (here: HW and LSO per partition). */
  class BarChart {
    constructor(canvas, options) {
      this.canvas = canvas;
      this.series = options.series;
      this.format = options.format || formatNumber;
      this.maxCategories = options.maxCategories || 40;
      this.categories = [];
      this.values = {};
      this.highlight = [];
      charts.add(this);
    }

    /* categories: labels; valuesByKey: key -> values per category; highlight: per category. */
    setData(categories, valuesByKey, highlight) {
      this.categories = categories.slice(0, this.maxCategories);
      this.values = {};
      for (const s of this.series) this.values[s.key] = (valuesByKey[s.key] || []).slice(0, this.maxCategories);
      this.highlight = (highlight || []).slice(0, this.maxCategories);
      this.hidden = Math.max(0, categories.length - this.maxCategories);
      this.draw();
    }

    draw() {
      const { ctx, width, height } = prepare(this.canvas);
      let max = 0;
      for (const s of this.series) for (const v of this.values[s.key] || []) if (v > max) max = v;
      max = niceMax(max);
      const labelWidth = ctx.measureText(this.format(max)).width;
      const area = { left: Math.max(36, labelWidth + 12), right: width - 8, top: 24, bottom: height - 40 };
      yAxis(ctx, area, max, this.format);
      legend(ctx, this.series, area.left, 10);
      const n = this.categories.length;
      if (n === 0) {
        ctx.fillStyle = AXIS;
        ctx.textAlign = "center";
        ctx.fillText("no partitions", (area.left + area.right) / 2, (area.top + area.bottom) / 2);
        return;
      }
      if (this.hidden) {
        ctx.textAlign = "right";
        ctx.fillStyle = AXIS;
        ctx.fillText("+" + this.hidden + " more in the table", area.right, 10);
      }
      const slot = (area.right - area.left) / n;
      // Bars stay narrow when there are few partitions, centred in their slot.
      const barWidth = Math.max(1, Math.min(28, (slot * 0.8) / this.series.length));
      const groupWidth = barWidth * this.series.length;
      for (let i = 0; i < n; i += 1) {
        const left = area.left + i * slot + (slot - groupWidth) / 2;
        if (this.highlight[i]) {
          ctx.fillStyle = "rgba(179, 38, 30, 0.08)";
          ctx.fillRect(area.left + i * slot, area.top, slot, area.bottom - area.top);
        }
        this.series.forEach((s, j) => {
          const v = this.values[s.key][i] || 0;
          const h = (v / max) * (area.bottom - area.top);
          ctx.fillStyle = s.color;
          ctx.fillRect(left + j * barWidth, area.bottom - h, barWidth - 1, h);
        });
        // Category labels, as many as fit.
        const every = Math.ceil(n / Math.max(1, Math.floor((area.right - area.left) / 60)));
        if (i % every === 0) {
          ctx.save();
          ctx.fillStyle = this.highlight[i] ? "#b3261e" : AXIS;
          ctx.textAlign = "center";
          ctx.textBaseline = "top";
          const room = Math.max(60, slot * every) - 4;
          let label = this.categories[i];
          if (ctx.measureText(label).width > room) {
            while (label.length > 4 && ctx.measureText(label + "…").width > room) {
              label = label.slice(0, -2);
            }
            label += "…";
          }
          const centre = Math.min(
            Math.max(area.left + i * slot + slot / 2, area.left + room / 2),
            area.right - room / 2
          );
          ctx.fillText(label, centre, area.bottom + 4);
          ctx.restore();
        }
      }
    }
  }

  let pending = null;
  global.addEventListener("resize", () => {
    if (pending) return;
    pending = global.requestAnimationFrame(() => {
      pending = null;
      for (const chart of charts) chart.draw();
    });
  });

  global.FjordCharts = { LineChart, BarChart, formatNumber, formatBytes, formatSeconds };
})(window);
