// The page of one queue: its card, its actions (purge, change the mode),
// configuration and counters.

import { el, kv, nodes } from './dom.js';
import * as api from './api.js';
import { int, ms, bytes, ago } from './format.js';
import { card, counterValues } from './queuecard.js';
import { scrape } from './metrics.js';
import { historyCharts } from './charts.js';

export function queuePage(root, rates, name) {
  // The action being confirmed ('purge' or 'mode') and the last result,
  // kept across the page's refreshes.
  let asking = null;
  let result = null;
  const page = {
    root,
    name: 'queue',
    title: name,
    live: true,
    async refresh() {
      let q, m, h;
      try {
        [q, m, h] = await Promise.all([api.queue(name), scrape().catch(() => null), api.history(name).catch(() => null)]);
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
        modeChange(q),
        h ? historyCharts(h) : null,
        actions(q),
        el('h2', {}, 'Counters ', el('small', {}, 'since the broker started')),
        kv(counters),
        config.length ? el('h2', {}, 'Configuration') : null,
        config.length ? kv(config) : null));
    },
  };

  // act runs a confirmed action and shows its outcome.
  async function act(run) {
    asking = null;
    try {
      result = { ok: true, text: await run() };
    } catch (e) {
      result = { ok: false, text: e.message };
    }
    await page.refresh();
  }

  function ask(what) {
    asking = what;
    result = null;
    page.refresh();
  }

  // actions: purge and change the mode, each confirmed on the page first.
  function actions(q) {
    const other = q.durability === 'durable' ? 'buffered' : 'durable';
    const out = [el('h2', {}, 'Actions')];
    if (asking === 'purge') {
      out.push(el('div', { class: 'confirm', id: 'confirm-purge' },
        el('p', {}, `Discard the ${int(q.ready)} ready messages of ${q.name}? Messages delivered and not settled stay with their consumers; nothing goes to the dead-letter queue.`),
        el('button', { id: 'purge-yes', class: 'danger', onclick: () => act(async () => {
          const rep = await api.purge(q.name);
          return `purged ${int(rep.purged)} messages`;
        }) }, 'Purge'),
        el('button', { id: 'purge-no', onclick: () => ask(null) }, 'Cancel')));
    } else if (asking === 'mode') {
      const text = other === 'durable'
        ? `Switch ${q.name} to durable? Publishing pauses while every partition syncs what it has written; from then on a confirm means synced. Confirms given before keep their buffered meaning.`
        : `Switch ${q.name} to buffered? From then on a confirm means written, not synced: a power cut can lose what was confirmed since the last background sync. Confirms given before stay durable.`;
      out.push(el('div', { class: 'confirm', id: 'confirm-mode' },
        el('p', {}, text),
        el('button', { id: 'mode-yes', class: other === 'buffered' ? 'danger' : null, onclick: () => act(async () => {
          const after = await api.setMode(q.name, other);
          return `now ${after.durability}`;
        }) }, 'Switch to ' + other),
        el('button', { id: 'mode-no', onclick: () => ask(null) }, 'Cancel')));
    } else {
      out.push(el('p', { class: 'actions' },
        el('button', { id: 'purge', onclick: () => ask('purge'), disabled: q.ready === 0 ? true : null }, 'Purge ready messages…'),
        ' ',
        el('button', { id: 'mode', onclick: () => ask('mode') }, 'Switch to ' + other + '…')));
    }
    if (result) out.push(el('p', { id: 'action-result', class: result.ok ? 'ok' : 'error' }, result.text));
    return out;
  }
  return page;
}

// modeChange says what a change of the queue's mode is doing or did.
function modeChange(q) {
  const m = q.modeChange;
  if (m.pending) {
    return el('p', { class: 'attention', 'data-field': 'mode-change' }, `Mode change to ${m.to} pending (started ${ago(m.since)}): publishing waits while the partitions sync.`);
  }
  if (m.last_error) {
    return el('p', { class: 'error', 'data-field': 'mode-change' }, `The last mode change failed ${ago(m.failed_at)}; the queue kept its mode: ${m.last_error}`);
  }
  return null;
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
