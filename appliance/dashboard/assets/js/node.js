// The node page: disk, sync latency and process figures from /metrics when
// the node serves them, and totals over every queue from /api/queues.

import { el, kv, nodes } from './dom.js';
import * as api from './api.js';
import { int, bytes, ms, ago, parseTime } from './format.js';
import { scrape } from './metrics.js';

export function nodePage(root, rates) {
  return {
    root,
    name: 'node',
    title: 'Node',
    live: true,
    async refresh() {
      const [list, m] = await Promise.all([api.queues(), scrape()]);
      const now = performance.now();
      root.replaceChildren(...nodes(
        el('h1', {}, 'Node'),
        m ? null : el('p', { class: 'warning', 'data-field': 'no-metrics' },
          'This node serves no /metrics, so sync latency, storage and process figures are not available here; the totals below come from /api/queues.'),
        m ? section('Sync', 'fdatasync: what turns written into durable', syncFigures(m)) : null,
        m ? section('Latency', null, latencyFigures(m)) : null,
        m ? section('Storage', 'the admin API reports no free space or disk budget yet', storageFigures(m)) : null,
        m ? section('Process', null, processFigures(m, rates.update('node:process', now, { cpu: m.sum('process_cpu_seconds_total') ?? 0 }))) : null,
        section('Queues', 'totals of /api/queues', queueFigures(list))));
    },
  };
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

function processFigures(m, r) {
  const out = [];
  const start = m.sum('process_start_time_seconds');
  if (start) out.push(['uptime', ago(new Date(start * 1000).toISOString()).replace(' ago', '')]);
  if (m.has('process_resident_memory_bytes')) out.push(['resident memory', bytes(m.sum('process_resident_memory_bytes'))]);
  if (m.has('process_cpu_seconds_total')) out.push(['CPU', r.cpu === null ? '—' : (100 * r.cpu).toFixed(1) + ' % of one core']);
  if (m.has('process_open_fds')) out.push(['open files', `${int(m.sum('process_open_fds'))} of ${int(m.sum('process_max_fds'))}`]);
  if (m.has('go_goroutines')) out.push(['goroutines', int(m.sum('go_goroutines'))]);
  if (m.has('go_memstats_heap_alloc_bytes')) out.push(['Go heap in use', bytes(m.sum('go_memstats_heap_alloc_bytes'))]);
  if (m.has('fibril_connections')) out.push([label('client connections', 'fibril_connections'), int(m.sum('fibril_connections'))]);
  return out;
}

function queueFigures(list) {
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
    ['partitions', int(parts)],
    ['unsynced records (written, not durable)', int(records)],
    ['unsynced bytes (written, not durable)', bytes(unsyncedBytes)],
    ['oldest unsynced record (age)', records ? ms(oldest) : '—'],
    ['latest sync of any partition (durable)', lastSync === null ? 'never' : ago(new Date(lastSync).toISOString())],
    ['latched partitions', int(latched)],
    ['backlog (confirmed at each queue\'s boundary)', int(backlog)],
    ['published since start (confirmed)', int(published)],
  ];
}

