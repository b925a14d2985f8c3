// Number, size, age and time formatting for the figures on the page.

const nf = new Intl.NumberFormat('en');

export function int(n) {
  return n === undefined || n === null ? '—' : nf.format(n);
}

export function bytes(n) {
  if (n === undefined || n === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
}

// ms formats a duration given in milliseconds.
export function ms(v) {
  if (v === undefined || v === null) return '—';
  if (v < 1) return v === 0 ? '0 ms' : v.toFixed(2) + ' ms';
  if (v < 1000) return Math.round(v) + ' ms';
  if (v < 60_000) return (v / 1000).toFixed(1) + ' s';
  if (v < 3_600_000) return (v / 60_000).toFixed(1) + ' min';
  return (v / 3_600_000).toFixed(1) + ' h';
}

// rate formats a per-second rate; null while there is only one sample.
export function rate(r) {
  if (r === null || r === undefined) return '—';
  if (r === 0) return '0/s';
  return (r < 10 ? r.toFixed(1) : nf.format(Math.round(r))) + '/s';
}

// parseTime reads an RFC 3339 time; null for missing or Go's zero time.
export function parseTime(s) {
  if (!s) return null;
  const t = Date.parse(s);
  if (Number.isNaN(t) || t <= 0) return null;
  return t;
}

// ago formats a past time as an age.
export function ago(s, now = Date.now()) {
  const t = parseTime(s);
  if (t === null) return 'never';
  return ms(Math.max(0, now - t)) + ' ago';
}

export function clock(t = new Date()) {
  return t.toLocaleTimeString('en-GB', { hour12: false });
}
