// The queues page: every queue as a card, refreshed live.

import { el, nodes } from './dom.js';
import * as api from './api.js';
import { card, counterValues } from './queuecard.js';
import { scrape } from './metrics.js';

export function queuesPage(root, rates) {
  return {
    root,
    name: 'queues',
    title: 'Queues',
    live: true,
    async refresh() {
      const [{ queues: list, failed }, m] = await Promise.all([api.queueList(), scrape().catch(() => null)]);
      const now = performance.now();
      list.sort((a, b) => a.name.localeCompare(b.name));
      rates.forget(new Set(list.map(q => q.name)));
      const buffered = list.filter(q => q.durability === 'buffered').length;
      root.replaceChildren(...nodes(
        el('h1', {}, 'Queues ', el('small', {}, `${list.length} queue${list.length === 1 ? '' : 's'}, ${buffered} buffered`)),
        list.length || failed.length ? null : el('p', { class: 'muted' }, 'No queues yet. Declare one with a client, `fibril queue declare`, or POST /api/queues.'),
        failed.map(f => el('article', { class: 'card', 'data-queue': f.name },
          el('header', {}, el('span', { class: 'name' }, f.name), el('span', { class: 'badge bad' }, 'not open')),
          el('p', { class: 'error' }, f.error))),
        list.map(q => card(q, rates.update(q.name, now, counterValues(q, m))))));
    },
  };
}
