// The card of one queue, shared by the queues page and the queue page.

import { el, stat, table } from './dom.js';
import { int, bytes, ms, rate, ago } from './format.js';
import { totals } from './api.js';

// boundary is where a queue confirms and delivers: a buffered queue at
// written, a durable one at durable.
export function boundary(q) {
  return q.durability === 'buffered' ? 'written' : 'durable';
}

export function modeBadge(q) {
  const d = q.durability || 'unknown';
  return el('span', { class: 'badge ' + (d === 'buffered' ? 'buffered' : d === 'durable' ? 'durable' : 'bad'),
    'data-field': 'durability', title: d === 'buffered'
      ? 'buffered: confirmed and delivered once written; synced in the background'
      : 'durable: confirmed and delivered once synced' }, d);
}

// counterValues picks the counters rates are computed from: "published"
// (confirmed publishes), "left" (messages that left the queue: settled,
// expired or dropped; published minus those still in it), "delivered"
// (deliveries, redeliveries included) and "acked".
export function counterValues(q) {
  const c = q.counters;
  const published = c.published ?? 0;
  return { published, left: published - q.messages, delivered: c.delivered ?? 0, acked: c.acked ?? 0 };
}

// card renders q. r are its rates (Rates.update of counterValues).
export function card(q, r, { link = true } = {}) {
  const t = totals(q);
  const b = boundary(q);
  const name = link
    ? el('a', { class: 'name', href: '#/queues/' + encodeURIComponent(q.name) }, q.name)
    : el('span', { class: 'name' }, q.name);
  return el('article', { class: 'card ' + q.durability, 'data-queue': q.name, 'data-durability': q.durability },
    el('header', {}, name, modeBadge(q),
      t.latched ? el('span', { class: 'badge bad' }, 'latched') : null,
      el('span', { class: 'meta' }, `${q.partitions.length} partition${q.partitions.length === 1 ? '' : 's'} · ${q.consumers} consumer${q.consumers === 1 ? '' : 's'}`)),
    q.warning ? el('p', { class: 'warning', 'data-field': 'warning' }, q.warning) : null,
    q.unavailable ? el('p', { class: 'error' }, 'Not serving: ' + q.unavailable) : null,
    el('dl', { class: 'stats' },
      stat('unsynced records', int(t.records), { field: 'unsynced-records', hint: '(written, not durable)', cls: t.records ? 'attention' : null }),
      stat('unsynced bytes', bytes(t.bytes), { field: 'unsynced-bytes', hint: '(written, not durable)', cls: t.bytes ? 'attention' : null }),
      stat('oldest unsynced', t.records ? ms(t.oldest) : '—', { field: 'oldest-unsynced', hint: '(age, written not durable)', cls: t.oldest > 1000 ? 'attention' : null }),
      stat('backlog', int(q.messages), { field: 'backlog', hint: `(confirmed at ${b})` }),
      stat('ready / in flight', `${int(q.ready)} / ${int(q.inFlight)}`, { field: 'ready-inflight', hint: `(at ${b})` }),
      stat('publish rate', rate(r.published), { field: 'publish-rate', hint: `(confirmed at ${b})` }),
      stat('deliver rate', rate(r.delivered), { field: 'deliver-rate', hint: `(visible at ${b})` }),
      stat('ack rate', rate(r.acked), { field: 'ack-rate' }),
      stat('leave rate', rate(r.left), { field: 'leave-rate', hint: '(settled, expired or dropped)' })),
    partitionTable(q, { full: !link }));
}

// partitionTable shows each partition's log. full adds the columns of the
// queue page.
export function partitionTable(q, { full = false } = {}) {
  const cols = [
    { label: 'partition', cell: p => String(p.index) },
    { label: 'unsynced records (written, not durable)', field: 'unsynced-records', cell: p => int(p.unsyncedRecords), cls: p => p.unsyncedRecords ? 'attention' : null },
    { label: 'unsynced bytes (written, not durable)', field: 'unsynced-bytes', cell: p => bytes(p.unsyncedBytes) },
    { label: 'oldest unsynced (age)', field: 'oldest-unsynced', cell: p => p.unsyncedRecords ? ms(p.oldestUnsyncedMs) : '—', cls: p => p.oldestUnsyncedMs > 1000 ? 'attention' : null },
    { label: `backlog (at ${boundary(q)})`, field: 'backlog', cell: p => int(p.messages) },
    { label: 'written next (offset)', field: 'written-next', cell: p => int(p.writtenNext) },
    { label: 'durable next (offset)', field: 'durable-next', cell: p => int(p.durableNext) },
    { label: 'last sync (durable)', field: 'last-sync', cell: p => ago(p.lastSync) + (p.syncPending ? ' · syncing' : '') },
  ];
  if (full) {
    cols.push(
      { label: 'ready / in flight', cell: p => `${int(p.ready)} / ${int(p.inFlight)}` },
      { label: 'head (lowest offset kept)', cell: p => int(p.head) },
      { label: 'segments', cell: p => int(p.segments) },
      { label: 'state', field: 'state', cell: p => p.latched ? 'latched: ' + (p.lastError || 'write or sync failed') : p.quarantined ? `${p.quarantined} range(s) quarantined` : 'ok',
        cls: p => p.latched || p.quarantined ? 'bad' : null },
    );
  } else {
    cols.push({ label: 'state', field: 'state', cell: p => p.latched ? 'latched' : 'ok', cls: p => p.latched ? 'bad' : null });
  }
  return table(cols, q.partitions, { rowAttrs: p => ({ 'data-partition': p.index }) });
}
