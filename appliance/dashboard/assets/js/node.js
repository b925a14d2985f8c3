// The node page: disk and process figures from /api/node, sync latency
// and log storage figures from /metrics when the node serves them, and
// totals over every queue from /api/queues.

import { el, kv, nodes, stat } from './dom.js';
import * as api from './api.js';
import { int, bytes, ms, ago, parseTime } from './format.js';
import { scrape } from './metrics.js';
import { historyCharts } from './charts.js';

export function nodePage(root, rates) {
  return {
    root,
    name: 'node',
    title: 'Node',
    live: true,
    async refresh() {
      const [list, m, n, h] = await Promise.all([api.queues(), scrape(), api.node(), api.history().catch(() => null)]);
      const now = performance.now();
      const cpu = n?.process?.cpu_seconds ?? (m ? m.sum('process_cpu_seconds_total') : null);
      const r = rates.update('node:process', now, typeof cpu === 'number' ? { cpu } : {});
      root.replaceChildren(...nodes(
        el('h1', {}, 'Node'),
        n ? null : el('p', { class: 'warning', 'data-field': 'no-node' },
          'This node serves no /api/node, so its disk figures are not available here.'),
        m ? null : el('p', { class: 'warning', 'data-field': 'no-metrics' },
          'This node serves no /metrics, so sync latency and log storage figures are not available here; the totals below come from /api/queues.'),
        h ? historyCharts(h) : null,
        n ? diskSection(n) : null,
        m ? section('Sync', 'fdatasync: what turns written into durable', syncFigures(m)) : null,
        m ? section('Latency', null, latencyFigures(m)) : null,
        m ? section('Log storage', null, storageFigures(m)) : null,
        section('Process', null, processFigures(n, m, cpu, r)),
        section('Queues', 'totals of /api/queues', queueFigures(list, n))));
    },
  };
}

// diskSection shows the data directory's file system as /api/node
// measured it: free and total, what the data directory takes, the budget
// and the free-space watermark, and whether publishes are refused.
function diskSection(n) {
  const d = n.disk || {};
  const known = typeof d.free_bytes === 'number' && typeof d.total_bytes === 'number' && d.total_bytes > 0;
  const used = typeof d.used_by_data_bytes === 'number' ? d.used_by_data_bytes : null;
  const budget = d.budget_bytes || 0, minFree = d.min_free_bytes || 0;
  const freeCls = !known || !minFree ? null : d.free_bytes <= minFree ? 'bad' : d.free_bytes < 2 * minFree ? 'attention' : null;
  const budgetCls = !budget || used === null ? null : used >= budget ? 'bad' : used > 0.8 * budget ? 'attention' : null;
  return [
    el('h2', {}, 'Disk', el('small', {}, ' the data directory\'s file system, measured now')),
    el('section', { class: 'card disk', 'data-field': 'disk' },
      el('header', {},
        d.refusing
          ? el('span', { class: 'badge bad', 'data-field': 'disk-state' }, 'refusing publishes')
          : el('span', { class: 'badge durable', 'data-field': 'disk-state' }, 'accepting publishes'),
        el('code', { class: 'meta', 'data-field': 'data-dir', title: 'data directory' }, n.data_dir || '')),
      d.refusing ? el('p', { class: 'error', 'data-field': 'refusal', title: d.refusal || null },
        `Publishes are refused (507 disk_full): ${refusalReason(d, known, used)}. Consumers still drain the queues; free space or raise the limit.`) : null,
      d.error ? el('p', { class: 'warning', 'data-field': 'disk-error' }, 'Not measured: ' + d.error) : null,
      known ? diskBar(d, used) : null,
      el('dl', { class: 'stats' },
        stat('free', known ? bytes(d.free_bytes) : '—', { field: 'disk-free', hint: '(available)', cls: freeCls }),
        stat('total', known ? bytes(d.total_bytes) : '—', { field: 'disk-total', hint: known ? `(${percent(d.total_bytes - d.free_bytes, d.total_bytes)} used)` : null }),
        stat('data directory', bytes(used), { field: 'disk-data', hint: known && used !== null ? `(${percent(used, d.total_bytes)} of the disk)` : null }),
        stat('disk budget', budget ? bytes(budget) : 'none', { field: 'disk-budget', cls: budgetCls,
          hint: budget && used !== null ? `(${percent(used, budget)} used)` : null }),
        stat('free-space watermark', minFree ? bytes(minFree) : 'off', { field: 'disk-watermark', hint: minFree ? '(refuse below)' : null })),
      budget && used !== null ? budgetBar(used, budget) : null),
  ];
}

// refusalReason says which limit refuses publishes, in the page's units;
// the server's own text when the figures do not show it.
function refusalReason(d, known, used) {
  const why = [];
  if (d.budget_bytes && used !== null && used >= d.budget_bytes) {
    why.push(`the data directory holds ${bytes(used)}, its budget is ${bytes(d.budget_bytes)}`);
  }
  if (d.min_free_bytes && known && d.free_bytes <= d.min_free_bytes) {
    why.push(`${bytes(d.free_bytes)} free, under the ${bytes(d.min_free_bytes)} watermark`);
  }
  return why.length ? why.join('; ') : (d.refusal || 'a disk limit is reached');
}

// diskBar is the file system as a bar: the data directory, other files
// and free space, with a mark where the free-space watermark begins.
function diskBar(d, used) {
  const total = d.total_bytes;
  const taken = Math.max(0, total - d.free_bytes);
  const data = Math.min(used ?? 0, taken);
  const parts = [
    { cls: 'data', bytes: data, title: `data directory: ${bytes(data)}` },
    { cls: 'other', bytes: taken - data, title: `other files and reserved blocks: ${bytes(taken - data)}` },
  ];
  const mark = d.min_free_bytes ? { at: Math.max(0, total - d.min_free_bytes) / total, title: `free-space watermark: ${bytes(d.min_free_bytes)} free` } : null;
  return [
    bar(`${bytes(d.free_bytes)} free of ${bytes(total)}`, parts.map(p => ({ ...p, fraction: p.bytes / total })), mark, d.refusing),
    el('p', { class: 'bar-legend' },
      el('span', { class: 'key data' }, 'data directory'),
      el('span', { class: 'key other' }, 'other files'),
      el('span', { class: 'key free' }, 'free'),
      mark ? el('span', { class: 'key mark' }, 'watermark') : null),
  ];
}

// budgetBar is the data directory against its budget.
function budgetBar(used, budget) {
  return [
    el('p', { class: 'bar-title' }, `data directory: ${bytes(used)} of the ${bytes(budget)} budget`),
    bar(`data directory ${percent(used, budget)} of its budget`, [{ cls: 'data', fraction: used / budget }], null, used >= budget),
  ];
}

// bar draws segments (fractions of the whole) left to right. Widths go
// through the CSSOM: the page's CSP allows no inline style attributes.
function bar(label, segments, mark, bad) {
  const b = el('div', { class: 'bar' + (bad ? ' bad' : ''), role: 'img', 'aria-label': label, title: label });
  for (const s of segments) {
    const seg = el('span', { class: 'seg ' + s.cls, title: s.title });
    seg.style.width = (100 * Math.min(1, Math.max(0, s.fraction))).toFixed(2) + '%';
    b.append(seg);
  }
  if (mark) {
    const m = el('span', { class: 'mark', title: mark.title });
    m.style.left = (100 * Math.min(1, Math.max(0, mark.at))).toFixed(2) + '%';
    b.append(m);
  }
  return b;
}

function percent(part, whole) {
  if (!whole) return '—';
  const p = 100 * part / whole;
  return (p > 0 && p < 0.1 ? '< 0.1' : p.toFixed(p < 10 ? 1 : 0)) + ' %';
}

function section(title, hint, pairs) {
  return [el('h2', {}, title, hint ? el('small', {}, ' ', hint) : null),
    pairs.length ? kv(pairs) : el('p', { class: 'muted' }, 'Not reported by this node.')];
}

// label is a figure's name with its metric underneath, for the operator
// who wants to graph it.
function label(text, metric) {
  return [text, el('br'), el('small', {}, el('code', {}, metric))];
}

function histogram(m, h) {
  const count = m.sum(h + '_count');
  if (!count) return 'none yet';
  const sum = m.sum(h + '_sum');
  return `mean ${ms(1000 * sum / count)} · p50 ≈ ${ms(1000 * m.quantile(h, 0.5))} · p99 ≈ ${ms(1000 * m.quantile(h, 0.99))} · ${int(count)} observed`;
}

function syncFigures(m) {
  const out = [];
  if (m.has('fibril_fsync_duration_seconds_count')) out.push([label('fdatasync latency', 'fibril_fsync_duration_seconds'), histogram(m, 'fibril_fsync_duration_seconds')]);
  const figures = [
    ['syncs completed (durable)', 'fibril_fsyncs_total'],
    ['background syncs', 'fibril_background_syncs_total'],
    ['background sync failures', 'fibril_background_sync_failures_total'],
    ['latched logs', 'fibril_latched_logs'],
  ];
  for (const [text, metric] of figures) if (m.has(metric)) out.push([label(text, metric), int(m.sum(metric))]);
  const fanIn = m.samples.filter(s => s.name === 'fibril_group_commit_appends_per_fsync' && s.value > 0);
  if (fanIn.length) {
    out.push([label('group commit: synced appends per fdatasync (mean of partitions)', 'fibril_group_commit_appends_per_fsync'),
      (fanIn.reduce((a, s) => a + s.value, 0) / fanIn.length).toFixed(1)]);
  }
  return out;
}

function latencyFigures(m) {
  const out = [];
  if (m.has('fibril_confirm_latency_seconds_count')) out.push([label('publish to confirm (at the queue\'s boundary)', 'fibril_confirm_latency_seconds'), histogram(m, 'fibril_confirm_latency_seconds')]);
  if (m.has('fibril_publish_to_deliver_seconds_count')) out.push([label('publish to deliver', 'fibril_publish_to_deliver_seconds'), histogram(m, 'fibril_publish_to_deliver_seconds')]);
  return out;
}

function storageFigures(m) {
  const out = [];
  if (m.has('fibril_partition_segments')) out.push([label('segment files', 'fibril_partition_segments'), int(m.sum('fibril_partition_segments'))]);
  if (m.has('fibril_queue_bytes')) out.push([label('unsettled message bytes', 'fibril_queue_bytes'), bytes(m.sum('fibril_queue_bytes'))]);
  if (m.has('fibril_partition_unsynced_bytes')) out.push([label('unsynced bytes (written, not durable)', 'fibril_partition_unsynced_bytes'), bytes(m.sum('fibril_partition_unsynced_bytes'))]);
  const hits = m.sum('fibril_tail_cache_hits_total'), misses = m.sum('fibril_tail_cache_misses_total');
  if (hits !== null && misses !== null) {
    out.push([label('tail cache hits / reads', 'fibril_tail_cache_hits_total'),
      hits + misses ? `${(100 * hits / (hits + misses)).toFixed(1)} % of ${int(hits + misses)} records` : 'no reads yet']);
  }
  if (m.has('fibril_quarantined_segments')) out.push([label('quarantined log ranges', 'fibril_quarantined_segments'), int(m.sum('fibril_quarantined_segments'))]);
  return out;
}

// processFigures prefers /api/node (n) and falls back on /metrics (m);
// open files and connections come from /metrics only. cpu is the CPU
// seconds used, r.cpu its rate.
function processFigures(n, m, cpu, r) {
  const p = n?.process || {};
  const metric = name => (m && m.has(name) ? m.sum(name) : null);
  const out = [];
  if (n?.version) out.push(['version', el('span', { 'data-field': 'version' }, n.version)]);
  const start = metric('process_start_time_seconds');
  if (typeof n?.uptime_s === 'number') out.push(['uptime', ms(1000 * n.uptime_s)]);
  else if (start) out.push(['uptime', ago(new Date(start * 1000).toISOString()).replace(' ago', '')]);
  if (p.pid) out.push(['process id', String(p.pid)]);
  const rss = p.rss_bytes ?? metric('process_resident_memory_bytes');
  if (rss !== null) out.push(['resident memory', el('span', { 'data-field': 'rss' }, bytes(rss))]);
  const heap = p.heap_bytes ?? metric('go_memstats_heap_alloc_bytes');
  if (heap !== null) out.push(['Go heap in use', bytes(heap)]);
  if (typeof cpu === 'number') {
    const now = typeof r.cpu === 'number' ? (100 * r.cpu).toFixed(1) + ' % of one core · ' : '';
    out.push(['CPU', `${now}${cpu.toFixed(1)} s since start`]);
  }
  const goroutines = p.goroutines ?? metric('go_goroutines');
  if (goroutines !== null) out.push(['goroutines', int(goroutines)]);
  if (metric('process_open_fds') !== null) out.push(['open files', `${int(metric('process_open_fds'))} of ${int(metric('process_max_fds'))}`]);
  if (metric('fibril_connections') !== null) out.push([label('client connections', 'fibril_connections'), int(metric('fibril_connections'))]);
  return out;
}

function queueFigures(list, n) {
  let parts = 0, records = 0, unsyncedBytes = 0, oldest = 0, latched = 0, backlog = 0, buffered = 0, published = 0;
  let lastSync = null;
  for (const q of list) {
    if (q.durability === 'buffered') buffered++;
    backlog += q.messages;
    published += q.counters.published || 0;
    for (const p of q.partitions) {
      parts++;
      records += p.unsyncedRecords;
      unsyncedBytes += p.unsyncedBytes;
      oldest = Math.max(oldest, p.oldestUnsyncedMs);
      if (p.latched) latched++;
      const t = parseTime(p.lastSync);
      if (t !== null && (lastSync === null || t > lastSync)) lastSync = t;
    }
  }
  return [
    ['queues', `${int(list.length)} (${int(buffered)} buffered)`],
    n && n.failed_queues ? [el('span', { class: 'bad' }, 'queues that failed to open'), el('span', { class: 'bad' }, int(n.failed_queues))] : null,
    ['partitions', int(parts)],
    ['unsynced records (written, not durable)', int(records)],
    ['unsynced bytes (written, not durable)', bytes(unsyncedBytes)],
    ['oldest unsynced record (age)', records ? ms(oldest) : '—'],
    ['latest sync of any partition (durable)', lastSync === null ? 'never' : ago(new Date(lastSync).toISOString())],
    ['latched partitions', int(latched)],
    ['backlog (confirmed at each queue\'s boundary)', int(backlog)],
    ['published since start (confirmed)', int(published)],
  ].filter(Boolean);
}

