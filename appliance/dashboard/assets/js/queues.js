// The queues page: every queue in one table, refreshed live, that an
// operator sorts (by any column), filters (by name) and pages through, so
// it stays fast at a thousand queues: only the page on screen is built.
// Rates come from the counters each queue reports, between two refreshes.

import { el, nodes } from './dom.js';
import * as api from './api.js';
import { bytes, int, rate } from './format.js';
import { boundary, modeBadge } from './queuecard.js';

const pageSize = 50;

// columns of the table: label, data-field, the value it sorts by, and the
// cell. r is the queue's rates.
const columns = [
  { label: 'queue', field: 'name', key: q => q.name, cell: q => el('a', { class: 'name', href: '#/queues/' + encodeURIComponent(q.name) }, q.name) },
  { label: 'mode', field: 'mode', key: q => q.durability, cell: q => modeBadge(q) },
  { label: 'partitions', field: 'partitions', key: q => q.partitions.length, cell: q => int(q.partitions.length), num: true },
  { label: 'consumers', field: 'consumers', key: q => q.consumers, cell: q => int(q.consumers), num: true },
  { label: 'backlog', field: 'backlog', key: q => q.messages, cell: q => int(q.messages), num: true, title: q => `confirmed at ${boundary(q)}` },
  { label: 'ready', field: 'ready', key: q => q.ready, cell: q => int(q.ready), num: true },
  { label: 'in flight', field: 'in-flight', key: q => q.inFlight, cell: q => int(q.inFlight), num: true },
  { label: 'unsynced', field: 'unsynced-records', key: q => api.totals(q).records, cell: q => int(api.totals(q).records), num: true,
    cls: q => (api.totals(q).records ? 'attention' : null), title: () => 'records written, not durable' },
  { label: 'publish/s', field: 'publish-rate', key: (q, r) => r.published ?? -1, cell: (q, r) => rate(r.published), num: true },
  { label: 'deliver/s', field: 'deliver-rate', key: (q, r) => r.delivered ?? -1, cell: (q, r) => rate(r.delivered), num: true },
  { label: 'ack/s', field: 'ack-rate', key: (q, r) => r.acked ?? -1, cell: (q, r) => rate(r.acked), num: true },
  { label: 'bytes', field: 'bytes', key: q => q.bytes ?? 0, cell: q => bytes(q.bytes ?? 0), num: true },
  { label: 'state', field: 'state', key: q => state(q), cell: q => state(q), cls: q => (state(q) === 'ok' ? null : 'bad') },
];

function state(q) {
  if (q.unavailable) return 'not serving';
  if (api.totals(q).latched) return 'latched';
  return 'ok';
}

export function queuesPage(root, rates) {
  const view = { filter: '', sort: 'name', desc: false, page: 0 };
  let list = [];
  let failed = [];
  const rowRates = new Map();

  const count = el('small', { 'data-field': 'queue-count' });
  const filter = el('input', { type: 'search', id: 'queue-filter', placeholder: 'filter by name', 'aria-label': 'filter queues by name',
    autocomplete: 'off', oninput: () => { view.filter = filter.value.trim().toLowerCase(); view.page = 0; render(); } });
  const pager = el('nav', { class: 'pager', 'aria-label': 'queue pages' });
  const failedBox = el('div');
  const tableBox = el('div');
  root.replaceChildren(el('h1', {}, 'Queues ', count), el('div', { class: 'toolbar' }, filter, pager), failedBox, tableBox);

  function sortBy(field) {
    view.desc = view.sort === field ? !view.desc : false;
    view.sort = field;
    view.page = 0;
    render();
  }

  function render() {
    const col = columns.find(c => c.field === view.sort) || columns[0];
    const shown = list.filter(q => !view.filter || q.name.toLowerCase().includes(view.filter));
    const keyed = shown.map(q => ({ q, r: rowRates.get(q.name) || {}, k: col.key(q, rowRates.get(q.name) || {}) }));
    keyed.sort((a, b) => {
      const c = typeof a.k === 'number' && typeof b.k === 'number' ? a.k - b.k : String(a.k).localeCompare(String(b.k));
      return (view.desc ? -c : c) || a.q.name.localeCompare(b.q.name);
    });
    const pages = Math.max(1, Math.ceil(keyed.length / pageSize));
    view.page = Math.min(view.page, pages - 1);
    const rows = keyed.slice(view.page * pageSize, (view.page + 1) * pageSize);
    const buffered = list.filter(q => q.durability === 'buffered').length;
    count.textContent = `${int(list.length)} queue${list.length === 1 ? '' : 's'}, ${int(buffered)} buffered` +
      (view.filter ? ` · ${int(shown.length)} match` : '');
    pager.replaceChildren(
      el('button', { type: 'button', 'data-field': 'prev-page', disabled: view.page === 0, onclick: () => { view.page--; render(); } }, '‹ prev'),
      el('span', { 'data-field': 'page' }, `page ${view.page + 1} of ${pages}`),
      el('button', { type: 'button', 'data-field': 'next-page', disabled: view.page >= pages - 1, onclick: () => { view.page++; render(); } }, 'next ›'));
    failedBox.replaceChildren(...failed.map(f => el('article', { class: 'card', 'data-queue': f.name },
      el('header', {}, el('span', { class: 'name' }, f.name), el('span', { class: 'badge bad' }, 'not open')),
      el('p', { class: 'error' }, f.error))));
    if (!list.length) {
      tableBox.replaceChildren(...nodes(failed.length ? null : el('p', { class: 'muted' },
        'No queues yet. Declare one with a client, `fibril queue declare`, or POST /api/queues.')));
      return;
    }
    const head = el('thead', {}, el('tr', {}, columns.map(c => el('th', { scope: 'col', class: c.num ? 'num' : null,
      'aria-sort': view.sort === c.field ? (view.desc ? 'descending' : 'ascending') : null },
      el('button', { type: 'button', class: 'sort', 'data-sort': c.field, onclick: () => sortBy(c.field) },
        c.label, view.sort === c.field ? (view.desc ? ' ▾' : ' ▴') : '')))));
    const body = el('tbody', {}, rows.map(({ q, r }) => el('tr', { 'data-queue': q.name, 'data-durability': q.durability },
      columns.map(c => el('td', { 'data-label': c.label, 'data-field': c.field, class: [c.num ? 'num' : '', c.cls ? c.cls(q) || '' : ''].join(' ').trim() || null,
        title: c.title ? c.title(q) : null }, c.cell(q, r))))));
    tableBox.replaceChildren(el('div', { class: 'table-wrap' }, el('table', { class: 'stack queues' }, head, body)));
  }

  return {
    root,
    name: 'queues',
    title: 'Queues',
    live: true,
    async refresh() {
      const data = await api.queueList();
      const now = performance.now();
      list = data.queues;
      failed = data.failed;
      rates.forget(new Set(list.map(q => q.name)));
      rowRates.clear();
      for (const q of list) {
        const c = q.counters || {};
        rowRates.set(q.name, rates.update(q.name, now, { published: c.published ?? 0, delivered: c.delivered ?? 0, acked: c.acked ?? 0 }));
      }
      render();
    },
  };
}
