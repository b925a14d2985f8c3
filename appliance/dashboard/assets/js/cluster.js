// The cluster page: members and the leader, and per queue its mode, its
// replication policy and, per partition, the owner, the followers, the
// epoch, the policy as it reads ("written on 2 of 3") and, on the owner,
// each follower's written and durable progress, as GET /api/cluster
// reports it.

import { el, nodes, stat, table } from './dom.js';
import * as api from './api.js';
import { int } from './format.js';

export function clusterPage(root) {
  return {
    root,
    name: 'cluster',
    title: 'Cluster',
    live: true,
    async refresh() {
      const v = await api.cluster();
      if (!v) {
        root.replaceChildren(el('h1', {}, 'Cluster'),
          el('p', { class: 'muted', 'data-field': 'not-clustered' },
            'This node is not a cluster member: it runs solo. A [cluster] table in fibril.toml or fibril cluster join makes it one.'));
        return;
      }
      const members = v.members || [];
      const queues = v.queues || [];
      root.replaceChildren(...nodes(
        el('h1', {}, 'Cluster ', el('small', {}, `${members.length} member${members.length === 1 ? '' : 's'}, seen from ${v.node_id}`)),
        el('dl', { class: 'stats' },
          stat('leader', v.leader || 'none known', { field: 'leader', cls: v.leader ? null : 'bad' }),
          stat('this node', v.node_id, { field: 'node-id', hint: v.leader && v.leader === v.node_id ? '(leader)' : null }),
          stat('voters', int(members.filter(m => m.voter).length), { field: 'voters', hint: `of ${members.length}` })),
        v.leader ? null : el('p', { class: 'warning', 'data-field': 'no-leader' },
          'No leader is known: declarations and placement wait for an election; queues already placed keep serving.'),
        el('h2', {}, 'Members'),
        table([
          { label: 'id', field: 'id', cell: m => m.id + (m.id === v.node_id ? ' (this node)' : '') },
          { label: 'role', field: 'role', cell: m => (m.id === v.leader ? 'leader' : '—') },
          { label: 'cluster address', field: 'cluster-addr', cell: m => m.cluster_addr || '—' },
          { label: 'client address', field: 'client-addr', cell: m => m.client_addr || '—' },
          { label: 'voter', field: 'voter', cell: m => (m.voter ? 'yes' : 'no') },
        ], members, { rowAttrs: m => ({ 'data-member': m.id }) }),
        (v.local_queues || []).length ? [
          el('h2', {}, 'Local queues ', el('small', {}, 'served by this node alone, not replicated')),
          table([
            { label: 'queue', field: 'local-name', cell: l => l.name },
            { label: 'state', field: 'local-state', cell: l => (l.joining ? 'joins once this node is a member' : 'kept local: name clash'),
              cls: l => (l.joining ? null : 'attention') },
            { label: 'reason', field: 'local-reason', cell: l => l.reason },
          ], v.local_queues, { rowAttrs: l => ({ 'data-local-queue': l.name }) }),
        ] : null,
        el('h2', {}, 'Queues ', el('small', {}, `${queues.length} replicated`)),
        queues.length ? null : el('p', { class: 'muted', 'data-field': 'no-queues' }, 'No cluster queues declared yet.'),
        queues.map(q => queueCard(q, v.node_id))));
    },
  };
}

// failoverText reads a queue's last failover: when, from whom to whom,
// how long it took, and why.
function failoverText(f) {
  const when = new Date(f.started_at).toLocaleString();
  const how = f.to ? `${f.from} → ${f.to} in ${int(f.duration_ms || 0)} ms` : `from ${f.from}, under way`;
  return `Last failover: epoch ${int(f.epoch)} at ${when}, ${how} (${f.reason})`;
}

function queueCard(q, self) {
  const parts = q.partitions || [];
  const mode = String(q.durability || '').toLowerCase();
  const progress = parts.flatMap(p => Object.entries(p.progress || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([follower, f]) => ({ partition: p.partition, follower, written: f.written_next, durable: f.durable_next,
      behind: p.log ? Math.max(0, p.log.written_next - f.written_next) : null, catchingUp: !!f.catching_up })));
  return el('article', { class: 'card ' + mode, 'data-queue': q.name },
    el('header', {},
      el('span', { class: 'name' }, q.name),
      el('span', { class: 'badge ' + mode, 'data-field': 'mode' }, mode || '?'),
      el('code', { class: 'meta', 'data-field': 'policy', title: 'replication policy' }, q.policy || '(default)')),
    (q.warnings || []).map(w => el('p', { class: 'warning', 'data-field': 'policy-warning' }, w)),
    q.last_failover ? el('p', { class: 'meta', 'data-field': 'last-failover' }, failoverText(q.last_failover)) : null,
    q.mode_change ? el('p', { class: 'warning', 'data-field': 'mode-change' },
      `Changing to ${q.mode_change.to} since ${new Date(q.mode_change.since).toLocaleString()}: pending until every copy the policy counts ` +
      `holds, synced, what was written before the change. Its owner already confirms ${q.mode_change.to === 'durable' ? 'only what those copies hold synced' : 'under the weaker rule'}.`) : null,
    table([
      { label: 'partition', field: 'partition', cell: p => String(p.partition) },
      { label: 'owner', field: 'owner', cell: p => p.owner + (p.owner === self ? ' (this node)' : '') },
      { label: 'followers', field: 'followers', cell: p => (p.followers || []).join(', ') || '—' },
      { label: 'epoch', field: 'epoch', cell: p => int(p.epoch) },
      { label: 'state', field: 'state', cell: p => (p.recovering ? `recovering: ${p.sealed || 0} of ${p.seals_needed} witnesses sealed` +
        (p.cut_sealed ? `, ${p.cut_sealed} more that may have lost unsynced records (waits for every copy)` : '') : 'serving'),
        cls: p => (p.recovering ? 'attention' : null) },
      { label: 'reads', field: 'reads', cell: p => p.reads || '—' },
      { label: 'applies', field: 'applies', cell: p => p.mode || '—' },
      { label: 'ceiling', field: 'ceiling', cell: p => (typeof p.ceiling === 'number' ? int(p.ceiling) : '—') },
    ], parts, { rowAttrs: p => ({ 'data-partition': p.partition }) }),
    progress.length ? [
      el('h3', { class: 'sub' }, 'Follower progress ', el('small', {}, 'next offset each follower reports, on partitions this node owns')),
      table([
        { label: 'partition', field: 'partition', cell: r => String(r.partition) },
        { label: 'follower', field: 'follower', cell: r => r.follower },
        { label: 'written next', field: 'written-next', cell: r => int(r.written) },
        { label: 'durable next', field: 'durable-next', cell: r => int(r.durable) },
        { label: 'unsynced', field: 'unsynced', cell: r => int(Math.max(0, r.written - r.durable)),
          cls: r => (r.written > r.durable ? 'attention' : null) },
        { label: 'behind owner', field: 'behind', cell: r => (r.behind === null ? '—' : int(r.behind)),
          cls: r => (r.behind ? 'attention' : null) },
        { label: 'stream', field: 'stream', cell: r => (r.catchingUp ? 'catching up' : 'push'),
          cls: r => (r.catchingUp ? 'attention' : null) },
      ], progress, { rowAttrs: r => ({ 'data-partition': r.partition, 'data-follower': r.follower }) }),
    ] : null);
}
