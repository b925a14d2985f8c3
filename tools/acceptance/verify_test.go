package acceptance

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hist builds a history by hand for the verifier's unit tests.
type hist struct {
	t0  time.Time
	evs []Event
}

func (h *hist) add(e Event) {
	e.T = h.t0.Add(time.Duration(len(h.evs)) * time.Millisecond)
	h.evs = append(h.evs, e)
}

func (h *hist) pub(q, pub string, seq int64, part int, off uint64) {
	id := pub + "." + itoa(seq)
	h.add(Event{Kind: KindSend, Queue: q, Pub: pub, Seq: seq, ID: id})
	h.add(Event{Kind: KindConfirm, Queue: q, Pub: pub, Seq: seq, ID: id, Part: part, Off: off})
}

func (h *hist) drain(q, pub string, seq int64, part int, off uint64) {
	h.add(Event{Kind: KindDrain, Queue: q, ID: pub + "." + itoa(seq), Part: part, Off: off, N: 1})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

var verifySpecs = []QueueSpec{{Name: "d"}, {Name: "b", Buffered: true}}

func TestVerifyClean(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	for i := int64(1); i <= 3; i++ {
		h.pub("d", "p", i, 0, uint64(i-1))
	}
	h.add(Event{Kind: KindDeliver, Queue: "d", ID: "p.1", Part: 0, Off: 0, N: 1})
	h.add(Event{Kind: KindAck, Queue: "d", ID: "p.1", Part: 0, Off: 0})
	h.add(Event{Kind: KindFault, Note: "kill"})
	h.add(Event{Kind: KindRestart})
	h.drain("d", "p", 2, 0, 1)
	h.drain("d", "p", 3, 0, 2)
	r := Verify(h.evs, verifySpecs)
	if f := r.Failures(); len(f) != 0 || len(r.Lost) != 0 || r.Duplicates != 0 {
		t.Fatalf("clean history reported:\n%s", r)
	}
	if r.Sent != 3 || r.Confirmed != 3 || r.Acked != 1 || r.Drained != 2 || r.Faults != 1 || r.Restarts != 1 {
		t.Fatalf("counts:\n%s", r)
	}
}

func TestVerifyDurableLossAndHole(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	for i := int64(1); i <= 3; i++ {
		h.pub("d", "p", i, 0, uint64(i-1))
	}
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.drain("d", "p", 1, 0, 0)
	h.drain("d", "p", 3, 0, 2)
	r := Verify(h.evs, verifySpecs)
	if len(r.Lost) != 1 || r.Lost[0].ID != "p.2" || len(r.Holes) != 1 {
		t.Fatalf("want p.2 lost as a hole:\n%s", r)
	}
	if r.Lost[0].Age <= 0 {
		t.Fatalf("loss age %v", r.Lost[0].Age)
	}
	if len(r.Failures()) != 2 { // the loss and the hole
		t.Fatalf("failures %q", r.Failures())
	}
}

func TestVerifyBufferedLossAgainstFrontier(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	for i := int64(1); i <= 4; i++ {
		h.pub("b", "p", i, 0, uint64(i-1))
	}
	h.add(Event{Kind: KindFrontier, Queue: "b", Part: 0, Durable: 2, Written: 4, LastSync: h.t0.Add(2 * time.Millisecond)})
	h.add(Event{Kind: KindCut})
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.drain("b", "p", 1, 0, 0)
	h.drain("b", "p", 2, 0, 1)
	// Offsets 2 and 3 were lost and are reused after the restart.
	h.pub("b", "p2", 1, 0, 2)
	h.drain("b", "p2", 1, 0, 2)
	r := Verify(h.evs, verifySpecs)
	if len(r.Lost) != 2 || len(r.Holes) != 0 {
		t.Fatalf("want two losses past the sync, no holes:\n%s", r)
	}
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("losses past the last sync are allowed on a buffered queue: %q", f)
	}
	for _, l := range r.Lost {
		if !l.AfterSync || !l.HasFrontier || l.SinceSync() <= 0 {
			t.Fatalf("loss %s not judged after the sync", l)
		}
	}
	if o, ok := r.OldestLoss("b"); !ok || o.ID != "p.3" {
		t.Fatalf("oldest loss %v %v", o, ok)
	}
	// A loss the frontier covered is a failure.
	h2 := &hist{t0: time.Unix(1000, 0), evs: append([]Event(nil), h.evs...)}
	for i := range h2.evs {
		if h2.evs[i].Kind == KindFrontier {
			h2.evs[i].Durable = 4
		}
	}
	if f := Verify(h2.evs, verifySpecs).Failures(); len(f) != 2 {
		t.Fatalf("losses below the durable frontier: failures %q", f)
	}
	// A loss with no fault after its confirm is a failure, frontier or not.
	h3 := &hist{t0: time.Unix(1000, 0), evs: append([]Event(nil), h.evs...)}
	h3.pub("b", "p2", 2, 0, 3)
	h3.add(Event{Kind: KindFrontier, Queue: "b", Part: 0, Durable: 3, Written: 4})
	if f := Verify(h3.evs, verifySpecs).Failures(); len(f) != 1 || !strings.Contains(f[0], "without a fault") {
		t.Fatalf("loss without a fault: failures %q", f)
	}
}

func TestVerifyUnexpectedDuplicatesOrderReturned(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	h.pub("d", "p", 1, 0, 5)
	h.pub("d", "p", 2, 0, 4) // confirmed below its predecessor
	h.add(Event{Kind: KindDeliver, Queue: "d", ID: "p.1", Part: 0, Off: 5, N: 1})
	h.add(Event{Kind: KindAck, Queue: "d", ID: "p.1", Part: 0, Off: 5})
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.drain("d", "p", 1, 0, 5) // the ack was lost: it comes back
	h.drain("d", "p", 2, 0, 4) // drained out of order
	h.add(Event{Kind: KindDrain, Queue: "d", ID: "ghost.1", Part: 0, Off: 9})
	h.add(Event{Kind: KindDrain, Queue: "b", ID: "p.2", Part: 0, Off: 4, Err: "body mismatch"})
	r := Verify(h.evs, verifySpecs)
	if len(r.AckedReturned) != 1 || r.AckedReturned[0].ID != "p.1" {
		t.Fatalf("acked returned:\n%s", r)
	}
	if r.Duplicates != 2 { // p.1 and p.2 twice each
		t.Fatalf("duplicates %d:\n%s", r.Duplicates, r)
	}
	if len(r.OrderViolations) != 2 {
		t.Fatalf("order violations %q", r.OrderViolations)
	}
	if len(r.Unexpected) != 3 { // never sent; wrong queue; its body (reported with the queue)
		t.Fatalf("unexpected %q", r.Unexpected)
	}
	if !strings.Contains(r.String(), "failure: ") {
		t.Fatalf("String lists no failures:\n%s", r)
	}
}

func TestHistoryRoundTripAndTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	h, err := CreateHistory(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	h.Note("seed %d", 7)
	h.Record(Event{Kind: KindConfirm, Queue: "q", Pub: "p", Seq: 1, ID: "p.1", Part: 1, Off: 2})
	h.Fault("kill")
	h.Restart()
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadHistory(path)
	if err != nil || len(evs) != 4 {
		t.Fatalf("read %d events: %v", len(evs), err)
	}
	if evs[0].Note != "seed 7" || evs[1].Off != 2 || evs[1].Part != 1 || evs[2].Kind != KindFault || evs[3].Kind != KindRestart {
		t.Fatalf("events %+v", evs)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h.Record(Event{Kind: KindNote}) // after Close: dropped, no panic
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"t":"2026-01-01T00:00:00Z","k":"se`)
	f.Close()
	if evs, err := ReadHistory(path); err != nil || len(evs) != 4 {
		t.Fatalf("torn tail: %d events, %v", len(evs), err)
	}
	if r, err := VerifyHistory(path, verifySpecs); err != nil || r.Confirmed != 1 || r.Faults != 1 || r.Restarts != 1 {
		t.Fatalf("VerifyHistory: %v\n%s", err, r)
	}
}

func TestBody(t *testing.T) {
	b := Body("p.12", 40)
	if len(b) != 40 || !strings.HasPrefix(string(b), "p.12:") {
		t.Fatalf("body %q", b)
	}
	if string(Body("p.12", 40)) != string(b) || len(Body("a-long-id", 3)) != len("a-long-id:") {
		t.Fatal("Body is not a function of its arguments")
	}
}

func TestVerifyPowerCutWindow(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	h.pub("d", "p", 1, 0, 0)
	h.add(Event{Kind: KindFrontier, Queue: "b", Part: 0, Durable: 0, Written: 1})
	h.pub("b", "q", 1, 0, 0)
	h.add(Event{Kind: KindCut})
	h.pub("d", "p", 2, 0, 1)                                                      // confirmed while the emulated cut was under way
	h.add(Event{Kind: KindFrontier, Queue: "b", Part: 0, Durable: 1, Written: 1}) // read after the cut began
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.drain("d", "p", 1, 0, 0)
	r := Verify(h.evs, verifySpecs)
	if len(r.Lost) != 2 {
		t.Fatalf("want two losses:\n%s", r)
	}
	for _, l := range r.Lost {
		switch l.ID {
		case "p.2":
			if !l.AfterCut {
				t.Fatalf("%s not marked after the cut", l)
			}
		case "q.1":
			if l.AfterCut || !l.AfterSync || l.DurableNext != 0 {
				t.Fatalf("%s judged against a frontier read after the cut", l)
			}
		}
	}
	if f := r.Failures(); len(f) != 0 {
		t.Fatalf("failures %q", f)
	}
}

// Two messages confirmed at one position clash, unless a power cut of a
// buffered queue lies between the confirms (it may lose written records,
// whose offsets are then written again). A message drained again, after
// the drain subscribed anew, is no order violation.
func TestVerifyClashesAndRedrains(t *testing.T) {
	h := &hist{t0: time.Unix(1000, 0)}
	h.pub("d", "p", 1, 0, 3)
	h.pub("b", "x", 1, 0, 7)
	h.add(Event{Kind: KindCut})
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.pub("d", "q", 1, 0, 3) // durable: a clash, cut or not
	h.pub("b", "y", 1, 0, 7) // buffered, across the cut: allowed
	h.pub("b", "y", 2, 0, 8)
	h.add(Event{Kind: KindFault}) // a kill: no cut
	h.add(Event{Kind: KindRestart})
	h.pub("b", "z", 1, 0, 8) // buffered, no cut since y.2: a clash
	h.add(Event{Kind: KindCut})
	h.pub("d", "w", 1, 0, 4) // durable, confirmed as the cut began: the cut may take it
	h.add(Event{Kind: KindFault})
	h.add(Event{Kind: KindRestart})
	h.pub("d", "v", 1, 0, 4) // its offset again: no clash
	h.drain("b", "y", 1, 0, 7)
	h.drain("b", "z", 1, 0, 8)
	h.drain("b", "y", 1, 0, 7) // redelivered: not out of order
	r := Verify(h.evs, verifySpecs)
	if len(r.Clashes) != 2 || !strings.Contains(r.Clashes[0], "d partition 0 offset 3") || !strings.Contains(r.Clashes[1], "b partition 0 offset 8") {
		t.Fatalf("clashes %q, want d 0/3 and b 0/8", r.Clashes)
	}
	if len(r.OrderViolations) != 0 {
		t.Fatalf("order violations %q", r.OrderViolations)
	}
	if !strings.Contains(strings.Join(r.Failures(), "\n"), "clash: ") {
		t.Fatalf("failures omit the clashes: %q", r.Failures())
	}
}
