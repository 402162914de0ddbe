// Live refresh, when JavaScript is on: the counters of every page (from
// stats.json) and the overview's chart (chart.svg), every few seconds.
// Everything works without it: the server renders the same numbers and SVG.
"use strict";

(function () {
  const PERIOD_MS = 5000;
  const base = document.body.dataset.base || "";
  const state = document.querySelector("[data-live-state]");
  const chartBox = document.querySelector("[data-chart]");

  function showStats(stats) {
    for (const node of document.querySelectorAll("[data-stat]")) {
      const value = stats[node.dataset.stat];
      if (value !== undefined && value !== null) node.textContent = String(value);
    }
  }

  async function refreshChart() {
    const answer = await fetch(chartBox.dataset.chart, { credentials: "same-origin" });
    if (!answer.ok) return;
    const parsed = new DOMParser().parseFromString(await answer.text(), "image/svg+xml");
    const fresh = parsed.documentElement;
    if (fresh.nodeName !== "svg") return; // a parse error document: keep the old chart
    chartBox.replaceChildren(document.importNode(fresh, true));
  }

  async function tick() {
    try {
      const answer = await fetch(base + "/stats.json", { credentials: "same-origin" });
      if (!answer.ok) throw new Error("HTTP " + answer.status);
      showStats(await answer.json());
      if (chartBox) await refreshChart();
      if (state) state.textContent = "live, updated " + new Date().toLocaleTimeString();
    } catch (error) {
      if (state) state.textContent = "live refresh failing: " + error.message;
    }
  }

  tick();
  setInterval(tick, PERIOD_MS);
})();
