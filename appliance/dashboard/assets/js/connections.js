// The connections and consumers pages: every client connection to the
// wire server (its name, address, protocol version, publishes) and every
// subscription on them (queue, prefetch, what it holds unsettled,
// deliveries and settles, with rates between two refreshes), as GET
// /api/connections reports them.

import { el, nodes, table } from './dom.js';
import { get } from './api.js';
import { ago, int, rate } from './format.js';

async function connections() {
  const { connections: list } = await get('api/connections');
  return (list || []).slice().sort((a, b) => a.id - b.id);
}

function clientName(c) {
  return c.client || '(unnamed)';
}

export function connectionsPage(root, rates) {
  return {
    root,
    name: 'connections',
    title: 'Connections',
    live: true,
    async refresh() {
      const list = await connections();
      const now = performance.now();
      rates.forget(new Set(list.map(c => 'conn:' + c.id)));
      const r = new Map(list.map(c => [c.id, rates.update('conn:' + c.id, now, { published: c.published || 0 })]));
      root.replaceChildren(...nodes(
        el('h1', {}, 'Connections ', el('small', {}, `${int(list.length)} client connection${list.length === 1 ? '' : 's'}`)),
        list.length ? table([
          { label: 'id', field: 'id', cell: c => String(c.id) },
          { label: 'client', field: 'client', cell: c => clientName(c) },
          { label: 'address', field: 'remote', cell: c => c.remote },
          { label: 'protocol', field: 'version', cell: c => 'v' + c.version + (c.tls ? ' · TLS' : '') },
          { label: 'connected', field: 'since', cell: c => ago(c.since) },
          { label: 'published', field: 'published', cell: c => int(c.published) },
          { label: 'confirmed', field: 'confirmed', cell: c => int(c.confirmed) },
          { label: 'publish/s', field: 'publish-rate', cell: c => rate(r.get(c.id).published) },
          { label: 'consumers', field: 'consumers', cell: c => int((c.subscriptions || []).length) },
        ], list, { rowAttrs: c => ({ 'data-connection': c.id }) })
          : el('p', { class: 'muted', 'data-field': 'no-connections' }, 'No client is connected.')));
    },
  };
}

export function consumersPage(root, rates) {
  return {
    root,
    name: 'consumers',
    title: 'Consumers',
    live: true,
    async refresh() {
      const list = await connections();
      const subs = list.flatMap(c => (c.subscriptions || []).map(s => ({ ...s, conn: c })));
      const now = performance.now();
      const key = s => `sub:${s.conn.id}:${s.id}`;
      rates.forget(new Set(subs.map(key)));
      const r = new Map(subs.map(s => [key(s), rates.update(key(s), now, { delivered: s.delivered || 0, acked: s.acked || 0 })]));
      root.replaceChildren(...nodes(
        el('h1', {}, 'Consumers ', el('small', {}, `${int(subs.length)} subscription${subs.length === 1 ? '' : 's'}`)),
        subs.length ? table([
          { label: 'queue', field: 'queue', cell: s => el('a', { href: '#/queues/' + encodeURIComponent(s.queue) }, s.queue) },
          { label: 'client', field: 'client', cell: s => clientName(s.conn) },
          { label: 'address', field: 'remote', cell: s => s.conn.remote },
          { label: 'prefetch', field: 'prefetch', cell: s => int(s.prefetch) },
          { label: 'unsettled', field: 'unsettled', cell: s => (s.unsettled < 0 ? '—' : int(s.unsettled)),
            cls: s => (s.prefetch && s.unsettled >= s.prefetch ? 'attention' : null) },
          { label: 'delivered', field: 'delivered', cell: s => int(s.delivered) },
          { label: 'acked', field: 'acked', cell: s => int(s.acked) },
          { label: 'nacked', field: 'nacked', cell: s => int(s.nacked) },
          { label: 'deliver/s', field: 'deliver-rate', cell: s => rate(r.get(key(s)).delivered) },
          { label: 'ack/s', field: 'ack-rate', cell: s => rate(r.get(key(s)).acked) },
          { label: 'state', field: 'state', cell: s => (s.paused ? 'paused (delivery budget)' : 'flowing'), cls: s => (s.paused ? 'attention' : null) },
        ], subs, { rowAttrs: s => ({ 'data-queue': s.queue, 'data-connection': s.conn.id, 'data-sub': s.id }) })
          : el('p', { class: 'muted', 'data-field': 'no-consumers' }, 'No subscription is open.')));
    },
  };
}
