// The bridges page: every NATS bridge fibrild runs, as GET /api/bridges
// reports it: what it is configured to move (its NATS servers and routes),
// connection state, last error, queues that do not exist, and the ingest
// and egress counters with their rates.

import { el, nodes, stat } from './dom.js';
import { get } from './api.js';
import { int, rate } from './format.js';

// Counters shown with a rate: [field, label, hint].
const counters = [
  ['received', 'received', '(from NATS)'],
  ['published', 'published', '(confirmed by fibril)'],
  ['duplicates', 'duplicates', '(dedupe window)'],
  ['jetstream_acked', 'JetStream acked', '(after the confirm)'],
  ['retries', 'retries', '(queue refused, connection lost)'],
  ['egressed', 'egressed', '(accepted by NATS)'],
  ['egress_failed', 'egress failed', '(released for redelivery)'],
  ['reconnects', 'reconnects', '(NATS)'],
];

export function bridgesPage(root, rates) {
  return {
    root,
    name: 'bridges',
    title: 'Bridges',
    live: true,
    async refresh() {
      const { bridges: list } = await get('api/bridges');
      const now = performance.now();
      list.sort((a, b) => a.name.localeCompare(b.name));
      rates.forget(new Set(list.map(b => 'bridge:' + b.name)));
      root.replaceChildren(...nodes(
        el('h1', {}, 'Bridges ', el('small', {}, `${list.length} NATS bridge${list.length === 1 ? '' : 's'}`)),
        list.length ? null : el('p', { class: 'muted', 'data-field': 'no-bridges' },
          'No bridges. Configure one with a [[bridge.nats]] table in fibril.toml (docs/bridge.md).'),
        list.map(b => card(b, rates.update('bridge:' + b.name, now, Object.fromEntries(counters.map(([f]) => [f, b[f] || 0])))))));
    },
  };
}

// stateBadge colours the NATS connection state.
function stateBadge(state) {
  const cls = state === 'connected' ? 'durable' : state === 'reconnecting' || state === 'stopped' ? 'bad' : 'buffered';
  return el('span', { class: 'badge ' + cls, 'data-field': 'state' }, state);
}

function card(b, r) {
  const missing = b.missing_queues || [];
  const dropped = Object.entries(b.dropped || {}).sort(([x], [y]) => x.localeCompare(y));
  const droppedTotal = dropped.reduce((s, [, n]) => s + n, 0);
  return el('article', { class: 'card', 'data-bridge': b.name },
    el('header', {},
      el('span', { class: 'name' }, b.name),
      stateBadge(b.state),
      b.blocked ? el('span', { class: 'badge bad', 'data-field': 'blocked' }, 'pulling paused') : null),
    missing.length ? el('p', { class: 'error', 'data-field': 'missing-queues' },
      `Queue${missing.length === 1 ? '' : 's'} missing: ${missing.join(', ')}. Declare ${missing.length === 1 ? 'it' : 'them'}; the bridge retries (JetStream) or drops (core) until then.`) : null,
    b.last_error ? el('p', { class: 'warning', 'data-field': 'last-error' }, 'Last error: ' + b.last_error) : null,
    (b.urls || []).length ? el('p', { class: 'muted', 'data-field': 'urls' }, 'NATS: ' + b.urls.join(', ')) : null,
    (b.routes || []).length ? el('ul', { class: 'routes', 'data-field': 'routes' }, b.routes.map(r => el('li', {}, r))) : null,
    el('dl', { class: 'stats' },
      counters.map(([f, label, hint]) => stat(label, int(b[f] || 0), { field: f.replaceAll('_', '-'), hint })),
      stat('published rate', rate(r.published), { field: 'published-rate' }),
      stat('dropped', int(droppedTotal), { field: 'dropped', hint: dropped.length ? '(' + dropped.map(([k, n]) => `${k} ${int(n)}`).join(', ') + ')' : null,
        cls: droppedTotal ? 'bad' : null })));
}
