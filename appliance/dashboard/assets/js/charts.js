// Small line charts of a queue's or the node's recent history (GET
// .../history): rates from the counters' differences, levels as sampled.
// SVG built with the DOM, no library.

import { el } from './dom.js';
import { int, rate } from './format.js';

const svgNS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs) {
  const n = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

// series turns samples into [{t, v}] for a counter's rate per second
// (rate) or a level (level).
export function rateSeries(samples, key) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (Date.parse(samples[i].t) - Date.parse(samples[i - 1].t)) / 1000;
    if (dt > 0) out.push({ t: Date.parse(samples[i].t), v: Math.max(0, (samples[i][key] - samples[i - 1][key]) / dt) });
  }
  return out;
}

export function levelSeries(samples, key) {
  return samples.map(s => ({ t: Date.parse(s.t), v: s[key] }));
}

// chart draws one series: its title, the newest value, and a line over
// the window with the maximum marked.
export function chart(title, points, { field, isRate = false } = {}) {
  const w = 300, h = 80;
  const fmt = v => (isRate ? rate(v) : int(Math.round(v)));
  const last = points.length ? points[points.length - 1].v : null;
  const box = svg('svg', { viewBox: `0 0 ${w} ${h}`, width: '100%', height: h, role: 'img', 'aria-label': title, preserveAspectRatio: 'none' });
  box.append(svg('rect', { x: 0, y: 0, width: w, height: h, class: 'chart-bg' }));
  let peak = 0;
  if (points.length >= 2) {
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    peak = Math.max(...points.map(p => p.v));
    const top = peak > 0 ? peak : 1;
    const xy = points.map(p => `${((p.t - t0) / Math.max(1, t1 - t0) * w).toFixed(1)},${(h - 4 - p.v / top * (h - 12)).toFixed(1)}`);
    box.append(svg('polyline', { points: xy.join(' '), class: 'chart-line', fill: 'none' }));
  }
  return el('figure', { class: 'chart', 'data-chart': field, 'data-points': points.length },
    el('figcaption', {}, title, ' ', el('strong', { 'data-field': field }, last === null ? '—' : fmt(last)),
      points.length >= 2 ? el('small', {}, ` · peak ${fmt(peak)}`) : null),
    box);
}

// historyCharts draws a history's charts: publish, deliver and ack rates,
// the backlog and the unsynced records.
export function historyCharts(h) {
  const s = h.samples || [];
  const minutes = s.length >= 2 ? Math.round((Date.parse(s[s.length - 1].t) - Date.parse(s[0].t)) / 60000) : 0;
  return el('section', { class: 'charts', 'data-field': 'charts' },
    el('h2', {}, 'History ', el('small', {}, s.length >= 2
      ? `last ${minutes || '<1'} min, a sample every ${Math.round(h.interval_ms / 1000)} s`
      : 'collecting: a sample every ' + Math.round((h.interval_ms || 5000) / 1000) + ' s')),
    el('div', { class: 'chart-grid' },
      chart('publish rate (confirmed)', rateSeries(s, 'published'), { field: 'chart-publish', isRate: true }),
      chart('deliver rate', rateSeries(s, 'delivered'), { field: 'chart-deliver', isRate: true }),
      chart('ack rate', rateSeries(s, 'acked'), { field: 'chart-ack', isRate: true }),
      chart('backlog (messages)', levelSeries(s, 'messages'), { field: 'chart-backlog' }),
      chart('unsynced records (written, not durable)', levelSeries(s, 'unsynced_records'), { field: 'chart-unsynced' })));
}
