package acceptance

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Loss is a confirmed message that was never read: no consumer acked it
// and the final drain did not find it.
type Loss struct {
	Queue, ID, Pub string
	Seq            int64
	Part           int
	Off            uint64
	Buffered       bool
	Epoch          int       // restarts before its confirm: the fault that lost it ended this epoch
	Confirmed      time.Time // when the confirm arrived
	// Faulted says a fault ended its epoch; a loss without one is never
	// allowed.
	Faulted bool
	// AfterCut: confirmed after the power cut began (History.CutBegins),
	// when a real power cut would already have stopped the broker. Not
	// held against any queue.
	AfterCut bool
	// Age is from the confirm to the fault that lost it (0 if no fault
	// followed).
	Age time.Duration
	// HasFrontier says a frontier of its partition was recorded in its
	// epoch before the fault; DurableNext and LastSync are the last one.
	HasFrontier bool
	DurableNext uint64
	LastSync    time.Time
	// AfterSync: the frontier recorded before the fault did not cover the
	// message (Off >= DurableNext), so no completed sync was known to hold
	// it. The only loss a buffered queue allows.
	AfterSync bool
}

// SinceSync is how long after the last completed sync known before the
// fault the message was confirmed (negative: confirmed before that sync).
func (l Loss) SinceSync() time.Duration {
	if l.LastSync.IsZero() {
		return 0
	}
	return l.Confirmed.Sub(l.LastSync)
}

// String names the loss, its position, epoch and age, and how it stands
// against the last sync.
func (l Loss) String() string {
	s := fmt.Sprintf("%s %s (pub %s seq %d) at %d/%d epoch %d age %v", l.Queue, l.ID, l.Pub, l.Seq, l.Part, l.Off, l.Epoch, l.Age.Round(time.Millisecond))
	if l.AfterCut {
		s += " (confirmed after the cut began)"
	}
	if l.HasFrontier {
		s += fmt.Sprintf(" durable_next %d, confirmed %v after the last sync", l.DurableNext, l.SinceSync().Round(time.Millisecond))
	}
	return s
}

// Returned is an acked message that was delivered again later.
type Returned struct {
	Queue, ID string
	Acked     time.Time
	// AckEpoch is the epoch of its ack; Again that of the delivery that
	// followed.
	AckEpoch, Again int
}

// Report is what Verify found in a history.
type Report struct {
	Sent, Confirmed, Failed, Delivered, Acked, Drained int
	Faults, Restarts                                   int
	// Lost: confirmed, never read.
	Lost []Loss
	// Holes: lost while a later confirm from the same publisher, to the
	// same partition in the same epoch, survived the fault.
	Holes []Loss
	// Unexpected: deliveries of messages never sent, with a wrong body, on
	// the wrong queue, or at another position than confirmed.
	Unexpected []string
	// Duplicates counts deliveries beyond the first of each message
	// (allowed: delivery is at least once).
	Duplicates int
	// OrderViolations: a publisher's confirms out of offset order within
	// a partition, or a drain out of offset order (a message drained
	// again, after a consumer subscribed anew, is a redelivery).
	OrderViolations []string
	// Clashes: two messages confirmed at one position of a partition
	// with no power cut of a buffered queue between the confirms, the
	// first confirmed before any cut began. Two owners confirming in one
	// epoch, or an owner writing over records a copy still holds, show as
	// one; only a buffered queue's cut, or a cut under way when the first
	// was confirmed (as Loss.AfterCut), may lose confirmed records and so
	// reuse their offsets.
	Clashes []string
	// AckedReturned: acked messages delivered again (allowed after a
	// fault that lost the ack; counted).
	AckedReturned []Returned
}

// Failures lists what the queues' promises forbid: any loss on a durable
// queue, a loss on a buffered queue that a completed sync covered (or for
// which no frontier was recorded), any hole, unexpected delivery or order
// violation. Duplicates and acked messages that return are allowed.
func (r Report) Failures() []string {
	var out []string
	for _, l := range r.Lost {
		switch {
		case l.AfterCut:
		case !l.Faulted:
			out = append(out, "lost a confirmed message without a fault: "+l.String())
		case !l.Buffered:
			out = append(out, "durable queue lost a confirmed message: "+l.String())
		case !l.HasFrontier:
			out = append(out, "buffered queue lost a message with no frontier recorded before the fault: "+l.String())
		case !l.AfterSync:
			out = append(out, "buffered queue lost a message a completed sync covered: "+l.String())
		}
	}
	for _, l := range r.Holes {
		out = append(out, "hole: "+l.String())
	}
	for _, u := range r.Unexpected {
		out = append(out, "unexpected: "+u)
	}
	for _, o := range r.OrderViolations {
		out = append(out, "order: "+o)
	}
	for _, c := range r.Clashes {
		out = append(out, "clash: "+c)
	}
	return out
}

// OldestLoss is the lost confirm with the largest Age on queue ("" for
// any queue), and whether there is one.
func (r Report) OldestLoss(queue string) (Loss, bool) {
	var best Loss
	found := false
	for _, l := range r.Lost {
		if (queue == "" || l.Queue == queue) && (!found || l.Age > best.Age) {
			best, found = l, true
		}
	}
	return best, found
}

// String summarises the report for a test log.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, confirmed %d, failed %d, delivered %d, acked %d, drained %d; faults %d, restarts %d\n",
		r.Sent, r.Confirmed, r.Failed, r.Delivered, r.Acked, r.Drained, r.Faults, r.Restarts)
	fmt.Fprintf(&b, "lost %d, holes %d, unexpected %d, duplicates %d, order violations %d, clashes %d, acked returned %d\n",
		len(r.Lost), len(r.Holes), len(r.Unexpected), r.Duplicates, len(r.OrderViolations), len(r.Clashes), len(r.AckedReturned))
	perQueue := map[string]int{}
	afterCut := 0
	for _, l := range r.Lost {
		perQueue[l.Queue]++
		if l.AfterCut {
			afterCut++
		}
	}
	if afterCut > 0 {
		fmt.Fprintf(&b, "  %d of the lost were confirmed after a power cut began (not held against the queues)\n", afterCut)
	}
	for _, q := range sortedKeys(perQueue) {
		o, _ := r.OldestLoss(q)
		fmt.Fprintf(&b, "  %s: %d lost, oldest %s\n", q, perQueue[q], o)
	}
	list := func(name string, items []string) {
		for i, s := range items {
			if i == 10 {
				fmt.Fprintf(&b, "  ... %d more %s\n", len(items)-10, name)
				break
			}
			fmt.Fprintf(&b, "  %s: %s\n", name, s)
		}
	}
	list("failure", r.Failures())
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type msgState struct {
	sendQ   string // the queue it was sent to
	sent    bool
	confirm *confirmInfo
	cEpoch  int
	cCut    bool // confirmed after its epoch's power cut began
	acked   bool
	ackT    time.Time
	ackEp   int
	drained bool
	seenEp  int // highest epoch it was delivered or drained in; -1: never
	count   int
}

// confirmInfo is what Verify keeps of a confirm.
type confirmInfo struct {
	Queue, Pub string
	Seq        int64
	Part       int
	Off        uint64
	T          time.Time
}

type frontierKey struct {
	epoch int
	queue string
	part  int
}

// Verify checks a history (ReadHistory) of load on queues against the
// queues' promises, after the final drain (Drain) has been recorded.
func Verify(events []Event, queues []QueueSpec) Report {
	return VerifySeq(slices.Values(events), queues)
}

// VerifyHistory is Verify over the history file at path, read as a
// stream: a long run's history need not fit in memory at once.
func VerifyHistory(path string, queues []QueueSpec) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{}, fmt.Errorf("acceptance: read history: %w", err)
	}
	defer f.Close()
	var readErr error
	events := func(yield func(Event) bool) {
		r := bufio.NewReaderSize(f, 1<<20)
		for line := 1; ; line++ {
			b, err := r.ReadBytes('\n')
			if errors.Is(err, io.EOF) {
				return // a torn last line has no newline: dropped
			}
			if err != nil {
				readErr = fmt.Errorf("acceptance: read history: %w", err)
				return
			}
			var e Event
			if err := json.Unmarshal(b, &e); err != nil {
				readErr = fmt.Errorf("acceptance: history %s line %d: %w", path, line, err)
				return
			}
			if !yield(e) {
				return
			}
		}
	}
	rep := VerifySeq(events, queues)
	return rep, readErr
}

// VerifySeq is Verify over a sequence of events.
func VerifySeq(events iter.Seq[Event], queues []QueueSpec) Report {
	buffered := map[string]bool{}
	for _, q := range queues {
		buffered[q.Name] = q.Buffered
	}
	var r Report
	msgs := map[string]*msgState{}
	get := func(id string) *msgState {
		m := msgs[id]
		if m == nil {
			m = &msgState{seenEp: -1}
			msgs[id] = m
		}
		return m
	}
	epoch := 0
	faultT := map[int]time.Time{}
	cut := map[int]bool{} // epochs whose power cut has begun
	frontiers := map[frontierKey]Event{}
	type position struct {
		queue string
		part  int
		off   uint64
	}
	type positionHolder struct {
		id       string
		t        time.Time
		cuts     int  // power cuts begun before its confirm
		afterCut bool // confirmed after a power cut began, before the restart: the cut may take it (Loss.AfterCut)
	}
	positions := map[position]positionHolder{}
	cuts := 0
	lastDrain := map[[2]string]uint64{} // queue, partition → last drained offset + 1
	deliver := func(e Event, drain bool) {
		m := get(e.ID)
		r.Delivered++
		m.count++
		if m.count > 1 {
			r.Duplicates++
		}
		if m.acked && epoch >= m.ackEp {
			r.AckedReturned = append(r.AckedReturned, Returned{Queue: e.Queue, ID: e.ID, Acked: m.ackT, AckEpoch: m.ackEp, Again: epoch})
			m.acked = false // count each return once
		}
		m.seenEp = max(m.seenEp, epoch)
		switch {
		case !m.sent:
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s delivered on %s at %d/%d but never sent", e.ID, e.Queue, e.Part, e.Off))
		case m.sendQ != e.Queue:
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s sent to %s delivered on %s", e.ID, m.sendQ, e.Queue))
		case m.confirm != nil && (m.confirm.Part != e.Part || m.confirm.Off != e.Off):
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s confirmed at %d/%d delivered at %d/%d", e.ID, m.confirm.Part, m.confirm.Off, e.Part, e.Off))
		}
		if e.Err != "" {
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s at %d/%d: %s", e.ID, e.Part, e.Off, e.Err))
		}
		if drain {
			r.Drained++
			again := m.drained
			m.drained = true
			if again {
				return // redelivered to a drain that subscribed anew
			}
			k := [2]string{e.Queue, fmt.Sprint(e.Part)}
			if next, ok := lastDrain[k]; ok && e.Off < next {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("drain of %s partition %d read offset %d after %d", e.Queue, e.Part, e.Off, next-1))
			}
			lastDrain[k] = e.Off + 1
		}
	}
	for e := range events {
		switch e.Kind {
		case KindSend:
			m := get(e.ID)
			m.sendQ, m.sent = e.Queue, true
			r.Sent++
		case KindConfirm:
			m := get(e.ID)
			ci := confirmInfo{Queue: e.Queue, Pub: e.Pub, Seq: e.Seq, Part: e.Part, Off: e.Off, T: e.T}
			m.confirm, m.cEpoch, m.cCut = &ci, epoch, cut[epoch]
			r.Confirmed++
			pos := position{e.Queue, e.Part, e.Off}
			if h, ok := positions[pos]; ok && h.id != e.ID && !h.afterCut && !(buffered[e.Queue] && cuts > h.cuts) {
				r.Clashes = append(r.Clashes, fmt.Sprintf("%s partition %d offset %d confirmed for %s at %s and for %s at %s",
					e.Queue, e.Part, e.Off, h.id, h.t.Format(time.RFC3339Nano), e.ID, e.T.Format(time.RFC3339Nano)))
			}
			positions[pos] = positionHolder{e.ID, e.T, cuts, cut[epoch]}
		case KindFail:
			r.Failed++
		case KindDeliver:
			deliver(e, false)
		case KindDrain:
			deliver(e, true)
		case KindAck:
			m := get(e.ID)
			m.acked, m.ackT, m.ackEp = true, e.T, epoch
			r.Acked++
		case KindFrontier:
			// Frontiers read after a cut began may count syncs the cut
			// dropped: only those from before count.
			if _, faulted := faultT[epoch]; !faulted && !cut[epoch] {
				frontiers[frontierKey{epoch, e.Queue, e.Part}] = e
			}
		case KindCut:
			cut[epoch] = true
			cuts++
		case KindFault:
			r.Faults++
			if _, ok := faultT[epoch]; !ok {
				faultT[epoch] = e.T
			}
		case KindRestart:
			r.Restarts++
			epoch++
			clear(lastDrain)
		}
	}
	// Losses, and the survivors' highest sequence per publisher, partition
	// and epoch for the holes.
	type pubKey struct {
		epoch int
		pub   string
		part  int
	}
	survivor := map[pubKey]int64{}
	type confirmed struct {
		seq int64
		off uint64
	}
	byPub := map[pubKey][]confirmed{}
	ids := sortedKeys(msgs)
	for _, id := range ids {
		m := msgs[id]
		if m.confirm == nil {
			continue
		}
		k := pubKey{m.cEpoch, m.confirm.Pub, m.confirm.Part}
		byPub[k] = append(byPub[k], confirmed{m.confirm.Seq, m.confirm.Off})
		if m.drained || m.seenEp > m.cEpoch {
			survivor[k] = max(survivor[k], m.confirm.Seq)
		}
		if m.drained || !m.ackT.IsZero() { // read: drained at the end, or acked by a consumer
			continue
		}
		c := m.confirm
		l := Loss{Queue: c.Queue, ID: id, Pub: c.Pub, Seq: c.Seq, Part: c.Part, Off: c.Off,
			Buffered: buffered[c.Queue], Epoch: m.cEpoch, Confirmed: c.T, AfterCut: m.cCut}
		if ft, ok := faultT[m.cEpoch]; ok {
			l.Faulted, l.Age = true, ft.Sub(c.T)
		}
		if f, ok := frontiers[frontierKey{m.cEpoch, c.Queue, c.Part}]; ok {
			l.HasFrontier, l.DurableNext, l.LastSync = true, f.Durable, f.LastSync
			l.AfterSync = c.Off >= f.Durable
		}
		r.Lost = append(r.Lost, l)
	}
	for _, l := range r.Lost {
		if s, ok := survivor[pubKey{l.Epoch, l.Pub, l.Part}]; ok && s > l.Seq {
			r.Holes = append(r.Holes, l)
		}
	}
	for _, k := range sortedPubKeys(byPub, func(k pubKey) string { return fmt.Sprintf("%06d %s %06d", k.epoch, k.pub, k.part) }) {
		cs := byPub[k]
		sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
		for i := 1; i < len(cs); i++ {
			if cs[i].off <= cs[i-1].off {
				r.OrderViolations = append(r.OrderViolations, fmt.Sprintf("publisher %s partition %d epoch %d: seq %d confirmed at offset %d, seq %d at %d",
					k.pub, k.part, k.epoch, cs[i-1].seq, cs[i-1].off, cs[i].seq, cs[i].off))
			}
		}
	}
	return r
}

func sortedPubKeys[K comparable, V any](m map[K]V, name func(K) string) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return name(out[i]) < name(out[j]) })
	return out
}
