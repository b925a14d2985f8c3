// The page of one queue: its card, its actions (purge, change the mode),
// configuration and counters.

import { el, kv, nodes, table } from './dom.js';
import * as api from './api.js';
import { int, ms, bytes, ago } from './format.js';
import { card, counterValues } from './queuecard.js';
import { historyCharts } from './charts.js';

export function queuePage(root, rates, name) {
  // The action being confirmed ('purge' or 'mode') and the last result,
  // kept across the page's refreshes; the last peek at the queue.
  let asking = null;
  let result = null;
  let peeked = null;
  // The page is built once from boxes that each refresh fills again, so
  // that the test-publish form keeps what is typed in it (and its focus)
  // across refreshes.
  const top = el('div');
  const actionsBox = el('div');
  const peekBox = el('div', { id: 'peek-box' });
  const rest = el('div');
  const publishForm = testPublishForm(name, async (text, id) => {
    try {
      const cf = await api.publish(name, text, id);
      result = { ok: true, text: `test message confirmed at partition ${cf.partition}, offset ${int(cf.offset)} (${cf.durability})` +
        (cf.duplicate ? ', a duplicate of one inside the dedupe window' : '') };
    } catch (e) {
      result = { ok: false, text: e.message };
    }
    await page.refresh();
  });
  let built = false;
  const page = {
    root,
    name: 'queue',
    title: name,
    live: true,
    async refresh() {
      let q, h;
      try {
        [q, h] = await Promise.all([api.queue(name), api.history(name).catch(() => null)]);
      } catch (e) {
        if (e.status === 404) {
          built = false;
          root.replaceChildren(el('h1', {}, name), el('p', { class: 'error' }, 'No such queue.'), el('a', { href: '#/queues' }, 'All queues'));
          return;
        }
        throw e;
      }
      const r = rates.update(q.name, performance.now(), counterValues(q));
      const counters = Object.entries(q.counters).map(([k, v]) => [k.replaceAll('_', ' '), int(v)]);
      const config = Object.entries(q.config).filter(([k]) => k !== 'name').map(([k, v]) => configPair(k, v));
      top.replaceChildren(...nodes(
        el('p', {}, el('a', { href: '#/queues' }, '← all queues')),
        card(q, r, { link: false }),
        modeChange(q),
        h ? historyCharts(h) : null));
      actionsBox.replaceChildren(...nodes(actions(q)));
      peekBox.replaceChildren(...nodes(peekView(peeked)));
      rest.replaceChildren(...nodes(
        el('h2', {}, 'Counters ', el('small', {}, 'since the broker started')),
        kv(counters),
        config.length ? el('h2', {}, 'Configuration') : null,
        config.length ? kv(config) : null));
      if (!built) {
        root.replaceChildren(top, actionsBox, publishForm, peekBox, rest);
        built = true;
      }
    },
  };

  // peek fetches up to 10 ready messages without settling them: they go
  // back to the queue at once, no delivery counted.
  async function peek() {
    try {
      const rep = await api.peek(name, 10);
      peeked = rep.messages || [];
      result = { ok: true, text: `peeked at ${int(peeked.length)} message${peeked.length === 1 ? '' : 's'}; none settled` };
    } catch (e) {
      result = { ok: false, text: e.message };
    }
    await page.refresh();
  }

  // act runs a confirmed action and shows its outcome.
  async function act(run) {
    asking = null;
    peeked = null; // what it showed may be gone
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
        el('button', { id: 'mode', onclick: () => ask('mode') }, 'Switch to ' + other + '…'),
        ' ',
        el('button', { id: 'peek', onclick: peek, title: 'show up to 10 ready messages without settling them' }, 'Peek at messages')));
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
    return el('p', { class: 'attention', 'data-field': 'mode-change' }, `Mode change to ${m.to} pending (started ${ago(m.since)}): ` +
      `it takes effect once every copy the queue counts holds, synced, what was written before it. Confirms name the mode they were given under.`);
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

// testPublishForm publishes one message typed on the page (text, with an
// optional message id for the dedupe window) through send(text, id).
function testPublishForm(name, send) {
  const body = el('textarea', { id: 'test-body', rows: 2, placeholder: 'message body (text)', 'aria-label': 'test message body' });
  const id = el('input', { id: 'test-id', type: 'text', placeholder: 'message id (optional)', 'aria-label': 'test message id', autocomplete: 'off' });
  const form = el('form', { class: 'test-publish', id: 'test-publish' },
    el('h3', { class: 'sub' }, 'Publish a test message'),
    body, el('div', { class: 'row' }, id, el('button', { type: 'submit', id: 'test-send' }, 'Publish to ' + name)));
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    send(body.value, id.value.trim()).then(() => { body.value = ''; });
  });
  return form;
}

// peekView lists the messages the last peek saw.
function peekView(msgs) {
  if (!msgs) return null;
  return [
    el('h3', { class: 'sub' }, 'Peeked messages ', el('small', {}, 'ready messages, not settled: still in the queue')),
    msgs.length ? table([
      { label: 'partition', field: 'partition', cell: m => String(m.partition) },
      { label: 'offset', field: 'offset', cell: m => int(m.offset) },
      { label: 'deliveries', field: 'deliveries', cell: m => int(m.deliveries) },
      { label: 'id', field: 'id', cell: m => m.id || '—' },
      { label: 'published', field: 'published', cell: m => ago(m.published_at) },
      { label: 'body', field: 'body', cell: m => (m.body !== undefined ? clip(m.body, 200) : `(binary, ${bytes(Math.floor((m.body_base64 || '').length * 3 / 4))})`) },
    ], msgs, { rowAttrs: m => ({ 'data-offset': m.offset, 'data-partition': m.partition }) })
      : el('p', { class: 'muted', 'data-field': 'peek-empty' }, 'No ready message.'),
  ];
}

function clip(s, n) {
  return s.length > n ? s.slice(0, n) + '…' : s;
}
