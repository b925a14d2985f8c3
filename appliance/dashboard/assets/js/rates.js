// Rates from counter deltas between two refreshes, computed in the browser.

// Rates remembers the last sample of each key (a queue name) and returns,
// for each counter, (value - previous value) / seconds between the two
// samples. The first sample of a key, or a counter that went down (a broker
// restart), gives null.
export class Rates {
  constructor() { this.last = new Map(); this.minGapMs = 400; }

  // update records values (an object of counters) taken at nowMs and
  // returns the rates. Samples closer than minGapMs to the previous one
  // return the previous rates, so a fast re-render does not divide by ~0.
  update(key, nowMs, values) {
    const prev = this.last.get(key);
    if (prev && nowMs - prev.at < this.minGapMs) return prev.rates;
    const rates = {};
    for (const [k, v] of Object.entries(values)) {
      if (!prev || typeof v !== 'number' || typeof prev.values[k] !== 'number' || v < prev.values[k]) {
        rates[k] = null;
      } else {
        rates[k] = (v - prev.values[k]) / ((nowMs - prev.at) / 1000);
      }
    }
    this.last.set(key, { at: nowMs, values, rates });
    return rates;
  }

  forget(keep) {
    for (const k of this.last.keys()) if (!keep.has(k)) this.last.delete(k);
  }
}
