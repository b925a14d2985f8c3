// The settings page: the runtime settings, changed live with PUT
// /api/settings. The server validates; its error is shown as it is.

import { el, nodes } from './dom.js';
import * as api from './api.js';

const known = {
  'storage.background_sync_interval_ms': {
    label: 'Background sync interval (ms)',
    help: 'Time between background syncs of every queue log: how long a confirmed message of a buffered queue may stay written but not durable. 0 turns the timer off and leaves syncing to the operating system. 0–60000, default 100.',
  },
  'publish.buffered_coalesce': {
    label: 'Buffered publish batching',
    help: '"window" (the default) appends what is pending at once; "gap" ends a batch of a buffered queue after a quiet gap. Durable queues always use the window.',
    choices: ['window', 'gap'],
  },
  'publish.buffered_gap_us': {
    label: 'Buffered quiet gap (µs)',
    help: 'The quiet gap that ends a buffered publish batch in gap mode. 1–100000, default 100.',
  },
};

const fieldId = key => 's-' + key.replace(/[^a-z0-9]+/gi, '-');

export function settingsPage(root) {
  let current = {};
  const result = el('div', { id: 'settings-result', role: 'status', 'aria-live': 'polite' });

  function field(key, value) {
    const k = known[key] || { label: key, help: '' };
    const id = fieldId(key);
    const input = k.choices
      ? el('select', { id, name: key }, k.choices.map(c => el('option', { value: c, selected: c === value }, c)))
      : el('input', { id, name: key, type: 'text', inputmode: typeof value === 'number' ? 'numeric' : null,
        value: String(value), autocomplete: 'off' });
    return el('label', { for: id }, k.label, el('small', {}, el('code', {}, key), k.help ? ' — ' + k.help : ''), input);
  }

  async function submit(ev) {
    ev.preventDefault();
    const form = ev.target;
    const next = {};
    const problems = [];
    for (const [key, old] of Object.entries(current)) {
      const raw = form.elements[key].value.trim();
      if (typeof old === 'number') {
        if (!/^-?\d+$/.test(raw)) problems.push(`${key}: "${raw}" is not a whole number`);
        next[key] = Number(raw);
      } else if (typeof old === 'boolean') {
        next[key] = raw === 'true';
      } else {
        next[key] = raw;
      }
    }
    if (problems.length) {
      result.replaceChildren(el('p', { class: 'error', 'data-field': 'error' }, problems.join('\n')));
      return;
    }
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const reply = await api.putSettings(next);
      current = reply && typeof reply === 'object' && Object.keys(reply).length ? reply : await api.settings();
      render();
      result.replaceChildren(el('p', { class: 'ok', 'data-field': 'saved' }, 'Saved; in force now.'));
    } catch (e) {
      result.replaceChildren(el('p', { class: 'error', 'data-field': 'error' }, e.message));
    } finally {
      button.disabled = false;
    }
  }

  function render() {
    root.replaceChildren(...nodes(
      el('h1', {}, 'Settings ', el('small', {}, 'runtime, persisted, applied live')),
      el('form', { class: 'settings', id: 'settings-form', novalidate: true, onsubmit: submit },
        Object.entries(current).map(([k, v]) => field(k, v)),
        el('div', {}, el('button', { type: 'submit', id: 'settings-save' }, 'Save'))),
      result));
  }

  return {
    root,
    name: 'settings',
    title: 'Settings',
    live: false, // a refresh would overwrite what the operator is typing
    async refresh() {
      current = await api.settings();
      render();
    },
  };
}
