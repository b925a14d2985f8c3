package acceptance

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind names what an Event records.
type Kind string

// The kinds of Event.
const (
	KindSend     Kind = "send"     // a publish was handed to the client
	KindConfirm  Kind = "confirm"  // the broker confirmed it (Part, Off)
	KindFail     Kind = "fail"     // the publish failed (Err): it may or may not be stored
	KindDeliver  Kind = "deliver"  // a consumer was handed it (Part, Off, N deliveries)
	KindAck      Kind = "ack"      // the consumer acked it
	KindFrontier Kind = "frontier" // the admin API's frontiers of one partition (Part, Durable, Written, LastSync)
	KindCut      Kind = "cut"      // a power cut is about to start: the instant a real one would stop the process too
	KindFault    Kind = "fault"    // a fault was applied (Note says which); recorded after it took effect
	KindRestart  Kind = "restart"  // the broker is about to be started again after a fault
	KindDrain    Kind = "drain"    // the verifier read it after the last restart (Part, Off)
	KindNote     Kind = "note"     // free text: seeds, schedules
)

// Event is one line of the history file.
type Event struct {
	T        time.Time `json:"t"`
	Kind     Kind      `json:"k"`
	Queue    string    `json:"q,omitempty"`
	Pub      string    `json:"pub,omitempty"` // publisher name
	Seq      int64     `json:"seq,omitempty"` // the publisher's sequence number, from 1
	ID       string    `json:"id,omitempty"`  // message ID
	Part     int       `json:"pt,omitempty"`
	Off      uint64    `json:"off,omitempty"`
	N        int       `json:"n,omitempty"` // Delivery.Deliveries
	Durable  uint64    `json:"durable,omitempty"`
	Written  uint64    `json:"written,omitempty"`
	LastSync time.Time `json:"last_sync,omitzero"`
	Err      string    `json:"err,omitempty"`
	Note     string    `json:"note,omitempty"`
}

// DefaultHistorySync is how often a History fsyncs what it has written.
const DefaultHistorySync = 50 * time.Millisecond

// History is an append-only JSON-lines file of Events. Record buffers;
// a background goroutine writes and fsyncs the buffer every SyncEvery
// (batched fsyncs), and Sync and Close do so at once. Keep the file on a
// file system that is not under test. Safe for concurrent use.
type History struct {
	path string
	f    *os.File

	mu     sync.Mutex
	w      *bufio.Writer
	err    error // first write or sync error; sticky
	closed bool

	stop chan struct{}
	done chan struct{}
}

// CreateHistory creates (or truncates) the history file at path and
// starts its background sync, every syncEvery (0: DefaultHistorySync).
func CreateHistory(path string, syncEvery time.Duration) (*History, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("acceptance: create history: %w", err)
	}
	if syncEvery <= 0 {
		syncEvery = DefaultHistorySync
	}
	h := &History{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go h.syncLoop(syncEvery)
	return h, nil
}

// Path is the history file's path.
func (h *History) Path() string { return h.path }

// Record appends e, stamping T with the current time when it is zero.
func (h *History) Record(e Event) {
	if e.T.IsZero() {
		e.T = time.Now()
	}
	b, err := json.Marshal(e)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.err != nil {
		return
	}
	if err != nil {
		h.err = fmt.Errorf("acceptance: encode event: %w", err)
		return
	}
	b = append(b, '\n')
	if _, err := h.w.Write(b); err != nil {
		h.err = fmt.Errorf("acceptance: write history: %w", err)
	}
}

// Note records free text, for example the seed and the fault schedule.
func (h *History) Note(format string, args ...any) {
	h.Record(Event{Kind: KindNote, Note: fmt.Sprintf(format, args...)})
}

// Sync writes and fsyncs everything recorded so far.
func (h *History) Sync() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.syncLocked()
}

func (h *History) syncLocked() error {
	if h.err != nil || h.closed {
		return h.err
	}
	if err := h.w.Flush(); err != nil {
		h.err = fmt.Errorf("acceptance: write history: %w", err)
		return h.err
	}
	if err := h.f.Sync(); err != nil {
		h.err = fmt.Errorf("acceptance: sync history: %w", err)
	}
	return h.err
}

func (h *History) syncLoop(every time.Duration) {
	defer close(h.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.Sync()
		}
	}
}

// Close syncs and closes the file; it returns the first error the history
// met.
func (h *History) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return h.err
	}
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.syncLocked()
	h.closed = true
	return errors.Join(err, h.f.Close())
}

// ReadHistory reads every event of a history file. A torn last line (the
// writer died mid-line) is ignored; a bad line elsewhere is an error.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acceptance: read history: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var out []Event
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a partial last line has no newline: dropped
		}
		if err != nil {
			return nil, fmt.Errorf("acceptance: read history: %w", err)
		}
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("acceptance: history %s line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
}

// Fault records that a fault (described by note) has taken effect: call
// it after the kill or power cut, before the restart.
func (h *History) Fault(note string) { h.Record(Event{Kind: KindFault, Note: note}) }

// CutBegins records that a power cut is about to be applied. A real power
// cut stops the broker in the same instant; the emulated one (a file
// system shutdown) leaves it running until it is killed, and a sync in
// flight at the shutdown can still report success, so Verify does not
// count confirms that arrive after this mark against the queue's promise
// (Loss.AfterCut).
func (h *History) CutBegins() { h.Record(Event{Kind: KindCut}) }

// Restart records that the broker is about to start again: call it just
// before Broker.Start, after Fault. Events after it belong to the next
// epoch.
func (h *History) Restart() { h.Record(Event{Kind: KindRestart}) }
