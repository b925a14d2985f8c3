// A reader of the Prometheus text exposition that /metrics serves, enough
// for the dashboard: samples, sums over labels, histogram quantiles.

import { request } from './api.js';

// scrape reads /metrics; null when the node does not serve it.
export async function scrape() {
  try {
    const text = await request('GET', 'metrics');
    if (typeof text !== 'string') return null;
    const m = new Metrics(parse(text));
    return m.samples.length ? m : null;
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

// parse returns [{name, labels, value}] of every sample line.
export function parse(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// Metrics answers questions about one scrape.
export class Metrics {
  constructor(samples) { this.samples = samples; }

  names() { return [...new Set(this.samples.map(s => s.name))]; }

  has(name) { return this.samples.some(s => s.name === name); }

  // sum adds the samples of name whose labels include match; null if
  // there are none.
  sum(name, match = {}) {
    const ss = this.samples.filter(s => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v));
    return ss.length ? ss.reduce((a, s) => a + s.value, 0) : null;
  }

  // histograms lists the base names of histograms whose name matches re.
  histograms(re) {
    return this.names().filter(n => n.endsWith('_bucket')).map(n => n.slice(0, -7)).filter(n => re.test(n));
  }

  // quantile estimates quantile q of histogram base (over all label sets
  // but le) by linear interpolation within the bucket, as Prometheus does.
  quantile(base, q) {
    const byLe = new Map();
    for (const s of this.samples) {
      if (s.name !== base + '_bucket') continue;
      const le = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
      byLe.set(le, (byLe.get(le) || 0) + s.value);
    }
    const buckets = [...byLe.entries()].sort((a, b) => a[0] - b[0]);
    if (!buckets.length) return null;
    const total = buckets[buckets.length - 1][1];
    if (!total) return null;
    const rank = q * total;
    let prevLe = 0, prevCount = 0;
    for (const [le, count] of buckets) {
      if (count >= rank) {
        if (le === Infinity) return prevLe;
        return prevLe + (le - prevLe) * ((rank - prevCount) / Math.max(count - prevCount, 1e-12));
      }
      prevLe = le; prevCount = count;
    }
    return prevLe;
  }
}
