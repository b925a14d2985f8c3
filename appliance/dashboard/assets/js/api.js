// The admin HTTP API as the page uses it. URLs are relative to the page,
// so the dashboard works wherever the admin server mounts it.

const tokenKey = 'fibril.admin.token';

// APIError carries the HTTP status and the server's error text.
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function setToken(t) {
  if (t) localStorage.setItem(tokenKey, t); else localStorage.removeItem(tokenKey);
}

// request sends a JSON request and returns the decoded reply (or the text
// for a non-JSON reply). A non-2xx status throws an APIError with the
// server's message: {"error": "..."} or the body text.
export async function request(method, path, body) {
  const headers = { Accept: 'application/json' };
  const token = localStorage.getItem(tokenKey);
  if (token) headers.Authorization = 'Bearer ' + token;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, 'admin API unreachable: ' + e.message);
  }
  const text = await res.text();
  let data = text;
  if ((res.headers.get('Content-Type') || '').includes('json') && text !== '') {
    try { data = JSON.parse(text); } catch { /* keep the text */ }
  }
  if (!res.ok) {
    let msg = typeof data === 'object' && data !== null ? (data.error || data.message || JSON.stringify(data)) : String(data).trim();
    if (!msg) msg = res.statusText;
    throw new APIError(res.status, `${method} ${path}: ${res.status} ${msg}`);
  }
  return data;
}

export const get = path => request('GET', path);

// queueList returns {queues, failed}: every open queue, normalised, with
// its partitions (a list without them is completed with one GET per
// queue), and the declared queues that failed to open ({name, error}).
export async function queueList() {
  const data = await get('api/queues');
  let list = (Array.isArray(data) ? data : (data.queues || [])).map(normQueue);
  if (list.some(q => !q.hasPartitions)) {
    list = await Promise.all(list.map(q => q.hasPartitions ? q : queue(q.name)));
  }
  return { queues: list, failed: Array.isArray(data.failed) ? data.failed : [] };
}

export async function queues() {
  return (await queueList()).queues;
}

export async function queue(name) {
  return normQueue(await get('api/queues/' + encodeURIComponent(name)));
}

export const settings = () => get('api/settings');

// node is GET /api/node (version, disk, process); null when the node does
// not serve it.
export async function node() {
  try {
    return await get('api/node');
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}
// cluster is GET /api/cluster (members, leader, assignments, followers'
// progress); null on a solo node, which answers 404.
export async function cluster() {
  try {
    return await get('api/cluster');
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

export const putSettings = s => request('PUT', 'api/settings', s);

// history is a queue's recent samples ({interval_ms, samples}); without a
// name, the node's.
export const history = name => get(name ? 'api/queues/' + encodeURIComponent(name) + '/history' : 'api/history');

// purge discards a queue's ready messages: {queue, purged}.
export const purge = name => request('POST', 'api/queues/' + encodeURIComponent(name) + '/purge');

// peek fetches up to max ready messages without settling them
// (POST .../get with ack "none"): {messages, settled}.
export const peek = (name, max) =>
  request('POST', 'api/queues/' + encodeURIComponent(name) + '/get', { max, ack: 'none' });

// publish publishes one text message, with an optional id: its confirm.
export const publish = (name, body, id) =>
  request('POST', 'api/queues/' + encodeURIComponent(name) + '/messages', id ? { body, id } : { body });

// setMode changes a queue's mode, fenced; the answer is the queue.
export const setMode = (name, durability) =>
  request('POST', 'api/queues/' + encodeURIComponent(name) + '/mode', { durability });

// normQueue reads a queue object of the admin API. The fields are
// snake_case; the name and mode may sit at the top or in "config".
export function normQueue(q) {
  const cfg = q.config || {};
  const num = v => (typeof v === 'number' ? v : 0);
  const parts = Array.isArray(q.partitions) ? q.partitions : [];
  return {
    name: q.name ?? cfg.name ?? '',
    durability: String(q.durability ?? cfg.durability ?? '').toLowerCase(),
    warning: q.warning || '',
    unavailable: q.unavailable || '',
    messages: num(q.messages),
    bytes: q.bytes,
    ready: num(q.ready),
    inFlight: num(q.in_flight),
    consumers: num(q.consumers),
    counters: q.counters || {},
    modeChange: q.mode_change || {},
    config: configOf(Object.keys(cfg).length ? cfg : q),
    hasPartitions: Array.isArray(q.partitions),
    partitions: parts.map(p => ({
      index: num(p.index),
      writtenNext: p.written_next,
      durableNext: p.durable_next,
      head: p.head,
      unsyncedRecords: num(p.unsynced_records),
      unsyncedBytes: num(p.unsynced_bytes),
      oldestUnsyncedMs: num(p.oldest_unsynced_ms),
      lastSync: p.last_sync,
      syncPending: !!p.sync_pending,
      latched: !!p.latched,
      lastError: p.last_error || '',
      segments: p.segments,
      messages: num(p.messages),
      ready: num(p.ready),
      inFlight: num(p.in_flight),
      quarantined: Array.isArray(p.quarantined) ? p.quarantined.length : 0,
      mode: p.mode || '',
    })),
  };
}

// configOf returns the configuration fields of a queue object: the plain
// values and the limits, without the figures the page shows elsewhere.
function configOf(q) {
  const figures = ['name', 'durability', 'partitions', 'counters', 'warning', 'messages', 'ready', 'in_flight', 'consumers', 'bytes', 'unavailable', 'mode_change'];
  const out = { partitions: Array.isArray(q.partitions) ? q.partitions.length : q.partitions };
  for (const [k, v] of Object.entries(q)) {
    if (figures.includes(k)) continue;
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) Object.assign(out, v);
    else out[k] = v;
  }
  return out;
}

// totals sums a queue's partitions: unsynced records and bytes, the oldest
// unsynced age, and whether any partition is latched.
export function totals(q) {
  let records = 0, bytes = 0, oldest = 0, latched = 0;
  for (const p of q.partitions) {
    records += p.unsyncedRecords;
    bytes += p.unsyncedBytes;
    oldest = Math.max(oldest, p.oldestUnsyncedMs);
    if (p.latched) latched++;
  }
  return { records, bytes, oldest, latched };
}
