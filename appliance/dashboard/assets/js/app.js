// The dashboard's entry: hash routes, the refresh loop and the status line.

import * as api from './api.js';
import { el } from './dom.js';
import { clock } from './format.js';
import { Rates } from './rates.js';
import { queuesPage } from './queues.js';
import { queuePage } from './queue.js';
import { settingsPage } from './settings.js';
import { nodePage } from './node.js';
import { bridgesPage } from './bridges.js';
import { uplinksPage } from './uplinks.js';
import { connectionsPage, consumersPage } from './connections.js';
import { clusterPage } from './cluster.js';

const refreshMs = 1000;
const main = document.getElementById('main');
const status = document.getElementById('status');
const auth = document.getElementById('auth');
const rates = new Rates();

let page = null;     // the page on screen
let timer = null;    // the next refresh
let generation = 0;  // bumps on every route change; stale refreshes drop out
let running = 0;     // the generation whose refresh is under way, or 0

// route maps the fragment to a page.
function route() {
  const parts = (location.hash.replace(/^#\/?/, '') || 'queues').split('/');
  const nav = parts[0];
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  // Each page renders into its own root, which tick puts on screen only
  // while the page is current: a refresh that ends after the operator
  // moved on never overwrites the next page.
  const root = el('div', { class: 'page' });
  switch (nav) {
    case 'queues':
      return parts.length > 1 && parts[1] !== '' ? queuePage(root, rates, decodeURIComponent(parts.slice(1).join('/'))) : queuesPage(root, rates);
    case 'settings': return settingsPage(root);
    case 'node': return nodePage(root, rates);
    case 'bridges': return bridgesPage(root, rates);
    case 'uplinks': return uplinksPage(root, rates);
    case 'connections': return connectionsPage(root, rates);
    case 'consumers': return consumersPage(root, rates);
    case 'cluster': return clusterPage(root);
    default: return null;
  }
}

function setStatus(text, error = false) {
  status.textContent = text;
  status.classList.toggle('error', error);
}

async function tick(gen) {
  clearTimeout(timer);
  if (running === gen) return; // this page's refresh is under way; it schedules the next
  running = gen;
  try {
    const p = page;
    await p.refresh();
    if (gen !== generation) return;
    if (main.firstChild !== p.root) main.replaceChildren(p.root);
    main.dataset.page = p.name; // what main shows, for scripts and tests
    auth.hidden = true;
    setStatus((page.live ? 'live · updated ' : 'loaded ') + clock());
  } catch (e) {
    if (gen !== generation) return;
    setStatus(e.message, true);
    if (e.status === 401 || e.status === 403) {
      auth.hidden = false;
      document.getElementById('auth-token').focus();
      return; // no retries until a token is given
    }
  }
  finally {
    if (running === gen) running = 0;
  }
  if (gen === generation && page.live && !document.hidden) {
    timer = setTimeout(() => tick(gen), refreshMs);
  }
}

// probeCluster shows the Cluster link only while the node answers
// /api/cluster (a cluster member; a solo node answers 404). The link's
// data-probed says what the last probe found: member, solo or unknown.
async function probeCluster() {
  const link = document.getElementById('nav-cluster');
  let found = 'unknown'; // unreachable or no token yet: probed again on the next page change
  try {
    found = (await api.cluster()) ? 'member' : 'solo';
  } catch { /* keep unknown */ }
  link.hidden = found !== 'member';
  link.dataset.probed = found;
}

function show() {
  probeCluster();
  generation++;
  clearTimeout(timer);
  page = route();
  delete main.dataset.page;
  main.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
  if (!page) {
    main.replaceChildren(el('h1', {}, 'Not found'), el('a', { href: '#/queues' }, 'Queues'));
    return;
  }
  document.title = page.title + ' · Fibril';
  tick(generation);
}

auth.addEventListener('submit', ev => {
  ev.preventDefault();
  api.setToken(document.getElementById('auth-token').value.trim());
  show();
});
addEventListener('hashchange', show);
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && page && page.live) tick(generation);
});
show();
