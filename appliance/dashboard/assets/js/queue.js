// The page of one queue: its card, configuration and counters.

import { el, kv, nodes } from './dom.js';
import * as api from './api.js';
import { int, ms, bytes } from './format.js';
import { card, counterValues } from './queuecard.js';
import { scrape } from './metrics.js';

export function queuePage(root, rates, name) {
  return {
    root,
    name: 'queue',
    title: name,
    live: true,
    async refresh() {
      let q, m;
      try {
        [q, m] = await Promise.all([api.queue(name), scrape().catch(() => null)]);
      } catch (e) {
        if (e.status === 404) {
          root.replaceChildren(el('h1', {}, name), el('p', { class: 'error' }, 'No such queue.'), el('a', { href: '#/queues' }, 'All queues'));
          return;
        }
        throw e;
      }
      const r = rates.update(q.name, performance.now(), counterValues(q, m));
      const counters = Object.entries(q.counters).map(([k, v]) => [k.replaceAll('_', ' '), int(v)]);
      const config = Object.entries(q.config).filter(([k]) => k !== 'name').map(([k, v]) => configPair(k, v));
      root.replaceChildren(...nodes(
        el('p', {}, el('a', { href: '#/queues' }, '← all queues')),
        card(q, r, { link: false }),
        el('h2', {}, 'Counters ', el('small', {}, 'since the broker started')),
        kv(counters),
        config.length ? el('h2', {}, 'Configuration') : null,
        config.length ? kv(config) : null));
    },
  };
}

// configPair names a configuration field and says what its zero means.
function configPair(key, v) {
  let label = key.replaceAll('_', ' ');
  let text = v === null || typeof v === 'object' ? JSON.stringify(v) : String(v);
  if (key.endsWith('_ms')) {
    label = label.slice(0, -3);
    text = v ? ms(v) : 'off';
  }
  if (v === '' || v === 0) {
    if (key === 'dead_letter') text = 'none';
    else if (key.startsWith('max_')) text = 'unlimited';
  }
  if (typeof v === 'number' && key.endsWith('bytes') && v) text = bytes(v);
  return [label, text];
}
