package appliance

import (
	"fmt"
	"time"
)

// QueueInfo is what an operator sees of a queue. Every position names its
// boundary: written (handed to the operating system) or durable (synced).
type QueueInfo struct {
	Config      QueueConfig
	Warning     string // the loss-window warning for buffered queues
	Messages    int64  // unsettled: ready plus in flight
	Bytes       int64  // what the unsettled messages store: bodies, headers and ids, as MaxBytes counts
	Ready       int64
	InFlight    int64 // leased to consumers or being settled
	Consumers   int
	Counters    QueueCounters
	Dedupe      DedupeInfo // the dedupe table, all partitions together; zero without a dedupe window
	Partitions  []PartitionInfo
	Unavailable string // why the queue is not serving, if it is not
	// ModeChange is the queue's mode change in progress and the last one
	// that failed (mode.go); Config.Durability is the mode in effect.
	ModeChange ModeChange
}

// QueueCounters count since the broker started.
type QueueCounters struct {
	Published       int64
	Duplicates      int64
	Expired         int64
	Discarded       int64
	DeadLettered    int64
	RejectedFull    int64 // refused by the queue's limits
	RejectedDisk    int64 // refused by the disk budget, the free-space watermark, or no space to grow a log
	DroppedOverflow int64 // oldest messages dropped by the drop-oldest policy
	LostQuarantined int64 // messages lost with segments quarantined since start
	Delivered       int64 // deliveries handed to consumers, redeliveries included
	Redelivered     int64 // of which a message's second or later delivery
	Acked           int64 // deliveries acknowledged
	Requeued        int64 // deliveries nacked with requeue: ready again
	Rejected        int64 // deliveries nacked without requeue: discarded or dead-lettered
	Purged          int64 // ready messages discarded by a purge
}

// Quarantined is a range of a partition's log set aside as corrupt.
type Quarantined struct {
	FromOffset, ToOffset uint64 // [From, To)
	File                 string // the renamed segment file, kept for inspection
	// LostMessages counts the unsettled messages dropped with it when it was
	// found while serving. Found by replay at start-up, its records were
	// never read: the offset range bounds what was lost.
	LostMessages int64
}

// PartitionInfo reports one partition's log.
type PartitionInfo struct {
	Index           int
	Mode            Durability // the mode its appends complete under now (its applied mode)
	WrittenNext     uint64     // offset after the last record handed to the OS
	DurableNext     uint64     // offset after the last synced record
	Head            uint64     // lowest offset retained
	UnsyncedRecords uint64     // written, not yet synced
	UnsyncedBytes   int64
	OldestUnsynced  time.Duration // age of the oldest unsynced record; 0 when none
	LastSync        time.Time     // last successful sync
	SyncPending     bool
	Latched         bool
	LastError       string
	Segments        int
	Messages        int64
	Ready           int64
	InFlight        int64
	Quarantined     []Quarantined
	// LostRecords counts the records of the partition's log lost to
	// damage: the offsets of its quarantined ranges, found at start-up,
	// by the scrub or by a read. Each record is a publish or a settle.
	LostRecords uint64
	Log         LogCounters
}

// LogCounters count a partition log's work since it was opened.
type LogCounters struct {
	Syncs                  uint64 // completed fdatasyncs
	BackgroundSyncs        uint64 // of which started by the background interval
	BackgroundSyncFailures uint64
	SyncedAppends          uint64 // appends completed by those syncs: Syncs' fan-in
	LastSyncDuration       time.Duration
	TailCacheHits          uint64 // records read from the tail cache
	TailCacheMisses        uint64 // records not in the tail cache: read from the node's read cache or the segment files
	ReadCacheHits          uint64 // of those, records read from the node's read cache
}

// QueueInfo returns a queue's view.
func (b *Broker) QueueInfo(name string) (QueueInfo, error) {
	q, err := b.queue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	return q.info(time.Now()), nil
}

func (q *queue) info(now time.Time) QueueInfo {
	in := QueueInfo{Config: *q.cfg()}
	if q.cfg().Durability == Buffered {
		in.Warning = BufferedWarning
	}
	q.subsMu.Lock()
	in.Consumers = len(q.subs)
	q.subsMu.Unlock()
	c := &q.counters
	in.Counters = QueueCounters{
		Published: c.published.Load(), Duplicates: c.duplicates.Load(), Expired: c.expired.Load(),
		Discarded: c.discarded.Load(), DeadLettered: c.deadLettered.Load(),
		RejectedFull: c.rejectedFull.Load(), RejectedDisk: c.rejectedDisk.Load(), DroppedOverflow: c.dropped.Load(),
		LostQuarantined: c.lostQuarantined.Load(),
		Delivered:       c.delivered.Load(), Redelivered: c.redelivered.Load(),
		Acked: c.acked.Load(), Requeued: c.requeued.Load(), Rejected: c.rejected.Load(),
		Purged: c.purged.Load(),
	}
	in.Dedupe = q.dedupe.info()
	in.ModeChange = q.mode.snapshot()
	for _, p := range q.parts {
		st := p.log.Status()
		pi := PartitionInfo{
			Index: p.idx, Mode: durabilityOf(p.boundary()), WrittenNext: st.WrittenNext, DurableNext: st.DurableNext, Head: st.Head,
			UnsyncedRecords: st.DurableLagRecords, UnsyncedBytes: st.DurableLagBytes,
			LastSync: st.LastSync, SyncPending: st.SyncPending, Latched: st.Latched, Segments: st.Segments,
			LostRecords: p.log.LostRecords(),
			Log: LogCounters{
				Syncs: st.Syncs, BackgroundSyncs: st.BackgroundSyncs, BackgroundSyncFailures: st.BackgroundSyncFailures,
				SyncedAppends: st.SyncedAppends, LastSyncDuration: st.LastSyncDuration,
				TailCacheHits: st.TailCacheHits, TailCacheMisses: st.TailCacheMisses,
				ReadCacheHits: st.ReadCacheHits,
			},
		}
		if !st.OldestUnsynced.IsZero() {
			pi.OldestUnsynced = now.Sub(st.OldestUnsynced)
		}
		if st.LastError != nil {
			pi.LastError = st.LastError.Error()
			in.Unavailable = fmt.Sprintf("partition %d: %v", p.idx, st.LastError)
		}
		p.mu.Lock()
		pi.Messages = p.core.st.count
		pi.Ready, pi.InFlight = p.core.st.readyCount()
		for _, r := range p.quarantined {
			pi.Quarantined = append(pi.Quarantined, Quarantined{FromOffset: r.Hole.From, ToOffset: r.Hole.To, File: r.Hole.Path, LostMessages: r.Lost})
		}
		p.mu.Unlock()
		in.Messages += pi.Messages
		in.Bytes += p.bytes.Load()
		in.Ready += pi.Ready
		in.InFlight += pi.InFlight
		in.Partitions = append(in.Partitions, pi)
	}
	return in
}
