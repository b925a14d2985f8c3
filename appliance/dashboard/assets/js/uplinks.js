// The uplinks page: every [[uplink]] fibrild runs, as GET /api/uplinks
// reports it: where it forwards to (its remote nodes, the window), the
// link's state and last error, and per forwarded queue its remote queue,
// state and reason, both queues' modes (a weakened promise stands out),
// the backlog still to forward, the age of the oldest message waiting, the
// last remote confirm and the counters with the forwarding rate.

import { el, nodes, table } from './dom.js';
import { get } from './api.js';
import { ago, bytes, int, ms, rate } from './format.js';

export function uplinksPage(root, rates) {
  return {
    root,
    name: 'uplinks',
    title: 'Uplinks',
    live: true,
    async refresh() {
      const { uplinks } = await get('api/uplinks');
      const list = (uplinks || []).slice().sort((a, b) => a.name.localeCompare(b.name));
      const now = performance.now();
      const keep = new Set();
      const rowRates = new Map();
      for (const u of list) {
        for (const q of u.queues || []) {
          const key = `uplink:${u.name}:${q.local}`;
          keep.add(key);
          rowRates.set(key, rates.update(key, now, { forwarded: q.forwarded || 0 }));
        }
      }
      rates.forget(keep);
      root.replaceChildren(...nodes(
        el('h1', {}, 'Uplinks ', el('small', {}, `${list.length} uplink${list.length === 1 ? '' : 's'}`)),
        list.length ? null : el('p', { class: 'muted', 'data-field': 'no-uplinks' },
          'No uplinks. Forward local queues to a remote Fibril with an [[uplink]] table in fibril.toml (docs/uplink.md).'),
        list.map(u => card(u, q => rowRates.get(`uplink:${u.name}:${q.local}`)))));
    },
  };
}

// stateBadge colours a link's or a queue's state.
function stateBadge(state, field = 'state') {
  const cls = state === 'connected' ? 'durable' : state === 'refused' || state === 'backing off' ? 'bad' : 'buffered';
  return el('span', { class: 'badge ' + cls, 'data-field': field }, state || 'unknown');
}

function card(u, rateOf) {
  const queues = u.queues || [];
  return el('article', { class: 'card', 'data-uplink': u.name },
    el('header', {},
      el('span', { class: 'name' }, u.name),
      stateBadge(u.state),
      el('span', { class: 'meta', 'data-field': 'remote' }, u.remote ? 'connected to ' + u.remote : 'not connected')),
    u.last_error ? el('p', { class: 'warning', 'data-field': 'last-error' }, 'Last error: ' + u.last_error) : null,
    el('p', { class: 'muted', 'data-field': 'config' },
      `Forwards to ${(u.to || []).join(', ') || '—'} (tried in turn), at most ${int(u.window)} publishes in flight.`),
    queues.some(q => q.weakened) ? el('p', { class: 'warning', 'data-field': 'weakened' },
      'A durable local queue is forwarded into a buffered remote queue: its messages leave this node once the remote ' +
      'has them written, not synced; a power cut there can lose them.') : null,
    queues.length ? table([
      { label: 'Queue', field: 'queue', cell: q => `${q.local} → ${q.remote}` },
      { label: 'State', field: 'queue-state', cell: q => nodes(stateBadge(q.state, 'queue-state-badge'), q.reason ? el('small', {}, ' ' + q.reason) : null) },
      { label: 'Modes', field: 'modes', cell: q => `${q.local_durability || '?'} → ${q.remote_durability || '?'}`, cls: q => q.weakened ? 'bad' : null },
      { label: 'Backlog', field: 'backlog', cell: q => q.backlog_messages < 0 ? '—' : `${int(q.backlog_messages)} (${bytes(q.backlog_bytes)})` },
      { label: 'Oldest waiting', field: 'oldest', cell: q => q.oldest_waiting_ns ? ms(q.oldest_waiting_ns / 1e6) : '—' },
      { label: 'In flight', field: 'in-flight', cell: q => int(q.in_flight) },
      { label: 'Forwarded', field: 'forwarded', cell: q => int(q.forwarded) },
      { label: 'Rate', field: 'forwarded-rate', cell: q => rate((rateOf(q) || {}).forwarded) },
      { label: 'Resent', field: 'resent', cell: q => int(q.resent) },
      { label: 'Duplicates', field: 'duplicates', cell: q => int(q.duplicates) },
      { label: 'Refused', field: 'refused', cell: q => int(q.refused), cls: q => q.refused ? 'bad' : null },
      { label: 'Last confirm', field: 'last-confirm', cell: q => ago(q.last_confirm) },
    ], queues, { rowAttrs: q => ({ 'data-queue': q.local }) }) : el('p', { class: 'muted' }, 'No local queue matches its patterns yet.'));
}
