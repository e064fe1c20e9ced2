// raftlog console: live charts (uPlot) fed by Server-Sent Events. The pages work without
// this file; it only keeps the charts and a few numbers current.
"use strict";

(function () {
  const MAX_POINTS = 450;

  function chartSize(el) {
    return { width: Math.max(240, el.clientWidth), height: window.innerWidth < 600 ? 160 : 220 };
  }

  function makeChart(el, labels, data) {
    const colors = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2"];
    const series = [{}].concat(labels.map((name, i) => ({
      label: name.replace(/_/g, " "), stroke: colors[i % colors.length], width: 2, spanGaps: true,
    })));
    const opts = Object.assign(chartSize(el), { series: series, axes: [{}, { size: 60 }], legend: { live: true } });
    const chart = new uPlot(opts, data, el);
    window.addEventListener("resize", () => chart.setSize(chartSize(el)));
    return chart;
  }

  function readJSON(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function setText(selector, value) {
    const node = document.querySelector(selector);
    if (node) node.textContent = value === null || value === undefined ? "-" : String(value);
  }

  function ratesChart(el) {
    const initial = readJSON("rates-data");
    let names = initial.names;
    let chart = makeChart(el, names, [initial.t].concat(initial.series));
    const source = new EventSource(el.dataset.stream);
    source.onmessage = (event) => {
      const p = JSON.parse(event.data);
      if (p.names.join() !== names.join()) {
        chart.destroy();
        names = p.names;
        chart = makeChart(el, names, [p.t].concat(p.series));
      } else {
        chart.setData([p.t].concat(p.series));
      }
      p.names.forEach((name, i) => {
        const col = p.series[i];
        const last = col.length ? col[col.length - 1] : null;
        setText(`[data-rate="${name}"]`, last === null ? null : last.toFixed(1));
      });
    };
  }

  function lagChart(el) {
    const data = readJSON("lag-data") || [[], []];
    const chart = makeChart(el, ["total_lag"], data);
    const source = new EventSource(el.dataset.stream);
    source.onmessage = (event) => {
      const s = JSON.parse(event.data);
      data[0].push(s.t);
      data[1].push(s.total_lag);
      if (data[0].length > MAX_POINTS) { data[0].shift(); data[1].shift(); }
      chart.setData(data);
      setText("#total-lag", s.total_lag);
      setText("#max-lag", s.max_lag);
      setText("#group-state", s.state);
      setText("#group-members", s.members);
      for (const p of s.partitions) {
        const row = document.querySelector(`tr[data-tp="${CSS.escape(p.topic + "-" + p.partition)}"]`);
        if (!row) continue;
        for (const [col, value] of [["lag", p.lag], ["end", p.end], ["committed", p.committed]]) {
          const cell = row.querySelector(`[data-col="${col}"]`);
          if (cell) cell.textContent = value === null ? "-" : String(value);
        }
      }
    };
    source.addEventListener("problem", (event) => {
      setText("#group-state", "unreachable: " + JSON.parse(event.data));
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (typeof uPlot === "undefined") return;
    for (const el of document.querySelectorAll(".chart[data-kind]")) {
      if (el.dataset.kind === "rates") ratesChart(el);
      else if (el.dataset.kind === "lag") lagChart(el);
    }
  });
})();
