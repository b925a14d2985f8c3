package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// fakeServer is a small broker on wire.Reader and wire.Writer: hello with
// a token, declare (mode conflicts), publish with confirms (dedupe,
// MaxMessages), subscribe with a prefetch window, deliver, ack, nack,
// unsubscribe, heartbeats and Goodbye. One partition per queue. It keeps
// every frame it reads, and tests wait on its state with waitFor.
type fakeServer struct {
	t         *testing.T
	ln        net.Listener
	token     string // "" accepts any
	heartbeat uint32 // HelloOK.HeartbeatMillis
	maxFrame  uint32
	version   uint16      // the highest protocol version it speaks; 0: wire.Version
	tls       *tls.Config // serve TLS when set
	// onFrame, if set, runs on the connection's goroutine for each frame
	// read, before the fake handles it; false drops the frame. A test can
	// block in it to stop the fake reading.
	onFrame func(fc *fakeConn, f wire.Frame) bool
	wg      sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	queues   map[string]*fakeQueue
	conns    map[*fakeConn]bool
	received []wire.Frame
	hellos   int
	nextTag  uint64
}

type fakeQueue struct {
	name       string
	durability wire.Durability
	partitions uint16
	maxMsgs    uint64
	dedupe     bool
	ids        map[string]uint64
	next       uint64
	ready      []*fakeMsg
	subs       []*fakeSub
}

type fakeMsg struct {
	offset     uint64
	id         string
	headers    []wire.Header
	body       []byte
	deliveries uint32
}

type fakeSub struct {
	fc     *fakeConn
	id     uint32
	q      *fakeQueue
	window uint32
	held   map[uint64]*fakeMsg
}

type fakeConn struct {
	s    *fakeServer
	nc   net.Conn
	wmu  sync.Mutex
	w    *wire.Writer
	subs map[uint32]*fakeSub // guarded by s.mu
}

// newFake starts a fake on loopback; configure sets its fields before it
// accepts connections.
// fakePublishedAt is when the fake took its first message, in Unix ns.
const fakePublishedAt = 1_700_000_000_000_000_000

func newFake(t *testing.T, configure ...func(*fakeServer)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{
		t:        t,
		ln:       ln,
		maxFrame: wire.DefaultMaxFrame,
		changed:  make(chan struct{}),
		queues:   make(map[string]*fakeQueue),
		conns:    make(map[*fakeConn]bool),
	}
	for _, f := range configure {
		f(s)
	}
	if s.tls != nil {
		s.ln = tls.NewListener(ln, s.tls)
	}
	s.wg.Go(s.accept)
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) accept() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Go(func() { s.serve(nc) })
	}
}

// dialPipe is an Options.Dialer that connects over net.Pipe, which has no
// buffer: a fake that stops reading stops the client's writer.
func (s *fakeServer) dialPipe(ctx context.Context, network, addr string) (net.Conn, error) {
	client, server := net.Pipe()
	s.wg.Go(func() { s.serve(server) })
	return client, nil
}

func (s *fakeServer) close() {
	s.ln.Close()
	s.killConns()
	s.wg.Wait()
}

// killConns cuts every connection without a Goodbye.
func (s *fakeServer) killConns() {
	s.mu.Lock()
	for fc := range s.conns {
		fc.nc.Close()
	}
	s.mu.Unlock()
}

// waitFor waits until cond, checked under the fake's lock, holds.
func (s *fakeServer) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			s.t.Fatalf("fake server: timed out waiting for %s", what)
		}
	}
}

func (s *fakeServer) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// count is how many frames of type t the fake has read.
func (s *fakeServer) countLocked(t wire.FrameType) int {
	n := 0
	for _, f := range s.received {
		if f.Type() == t {
			n++
		}
	}
	return n
}

// ackedLocked is every tag of every Ack the fake has read, in order, and
// the number of Ack frames.
func (s *fakeServer) ackedLocked() (tags []uint64, frames int) {
	for _, f := range s.received {
		if a, ok := f.(*wire.Ack); ok {
			tags = append(tags, a.Tags...)
			frames++
		}
	}
	return tags, frames
}

func (s *fakeServer) serve(nc net.Conn) {
	fc := &fakeConn{s: s, nc: nc, w: wire.NewWriter(nc, wire.Options{}), subs: make(map[uint32]*fakeSub)}
	s.mu.Lock()
	s.conns[fc] = true
	s.mu.Unlock()
	defer s.drop(fc)
	r := wire.NewReader(nc, wire.Options{MaxFrame: int(s.maxFrame)})
	for {
		f, err := r.ReadFrame()
		if err != nil {
			if errors.Is(err, wire.ErrProtocol) {
				fc.send(&wire.Error{Code: wire.CodeOf(err), Message: err.Error()})
			}
			return
		}
		if s.onFrame != nil && !s.onFrame(fc, f) {
			continue
		}
		if !s.handle(fc, f) {
			return
		}
		if h, ok := f.(*wire.Hello); ok {
			// From HelloOK on, both sides use the version it settled.
			v := s.settle(h.Version)
			r.SetVersion(v)
			fc.wmu.Lock()
			fc.w.SetVersion(v)
			fc.wmu.Unlock()
		}
	}
}

// settle is the version a Hello asking for asked settles on.
func (s *fakeServer) settle(asked uint16) uint16 {
	v := wire.Version
	if s.version != 0 {
		v = s.version
	}
	return min(asked, v)
}

func (fc *fakeConn) send(fs ...wire.Frame) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	for _, f := range fs {
		fc.w.WriteFrame(f)
	}
	fc.w.Flush()
}

// drop ends a connection: its subscriptions' held messages go back to
// their queues, one delivery counted.
func (s *fakeServer) drop(fc *fakeConn) {
	fc.nc.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, fc)
	for _, sub := range fc.subs {
		s.endSubLocked(sub)
	}
	s.changedLocked()
}

func (s *fakeServer) endSubLocked(sub *fakeSub) {
	delete(sub.fc.subs, sub.id)
	q := sub.q
	for i, x := range q.subs {
		if x == sub {
			q.subs = append(q.subs[:i], q.subs[i+1:]...)
			break
		}
	}
	for _, m := range sub.held {
		q.ready = append(q.ready, m)
	}
	sub.held = nil
	s.dispatchLocked(q)
}

// handle acts on one frame; false closes the connection.
func (s *fakeServer) handle(fc *fakeConn, f wire.Frame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = append(s.received, f)
	defer s.changedLocked()
	switch f := f.(type) {
	case *wire.Hello:
		s.hellos++
		if s.token != "" && f.Token != s.token {
			fc.send(&wire.Error{Code: wire.CodeUnauthorized, Message: "wrong token"})
			return false
		}
		fc.send(&wire.HelloOK{Version: s.settle(f.Version), ServerName: "fake", SessionID: uint64(s.hellos),
			MaxFrame: s.maxFrame, HeartbeatMillis: s.heartbeat})
	case *wire.Heartbeat:
	case *wire.Goodbye:
		fc.send(&wire.Goodbye{Reason: "bye"})
		return false
	case *wire.Declare:
		fc.send(s.declareLocked(f))
	case *wire.Publish:
		fc.send(s.publishLocked(f))
	case *wire.Subscribe:
		q := s.queues[f.Queue]
		switch {
		case q == nil:
			fc.send(&wire.Error{Corr: f.Corr, Code: wire.CodeNotFound, Message: "no queue " + f.Queue})
		case fc.subs[f.SubID] != nil:
			fc.send(&wire.Error{Corr: f.Corr, Code: wire.CodeBadRequest, Message: "duplicate SubID"})
		default:
			window := f.Prefetch
			if window == 0 {
				window = 100 // the protocol's default
			}
			sub := &fakeSub{fc: fc, id: f.SubID, q: q, window: window, held: make(map[uint64]*fakeMsg)}
			fc.subs[f.SubID] = sub
			q.subs = append(q.subs, sub)
			fc.send(&wire.Subscribed{Corr: f.Corr, SubID: f.SubID, Partitions: q.partitions})
			s.dispatchLocked(q)
		}
	case *wire.Unsubscribe:
		sub := fc.subs[f.SubID]
		if sub == nil {
			fc.send(&wire.Error{Corr: f.Corr, Code: wire.CodeNotFound, Message: "no subscription"})
			break
		}
		s.endSubLocked(sub)
		fc.send(&wire.Unsubscribed{Corr: f.Corr, SubID: f.SubID})
	case *wire.Ack:
		s.settleLocked(fc, f.SubID, f.Tags, func(q *fakeQueue, m *fakeMsg) {})
	case *wire.Nack:
		s.settleLocked(fc, f.SubID, f.Tags, func(q *fakeQueue, m *fakeMsg) {
			if f.Requeue {
				q.ready = append([]*fakeMsg{m}, q.ready...)
			}
		})
	default:
		fc.send(&wire.Error{Code: wire.CodeBadRequest, Message: "unexpected " + f.Type().String()})
		return false
	}
	return true
}

func (s *fakeServer) declareLocked(f *wire.Declare) wire.Frame {
	q := s.queues[f.Queue]
	created := q == nil
	if created {
		q = &fakeQueue{name: f.Queue, durability: wire.DurabilityDurable, partitions: 1, ids: make(map[string]uint64)}
		if f.Durability != wire.DurabilityUnspecified {
			q.durability = f.Durability
		}
		if f.Partitions != 0 {
			q.partitions = f.Partitions
		}
		s.queues[f.Queue] = q
	} else if f.Durability != wire.DurabilityUnspecified && f.Durability != q.durability {
		return &wire.Error{Corr: f.Corr, Code: wire.CodeConflict, Message: "queue " + f.Queue + " is " + q.durability.String()}
	}
	if f.MaxMessages != 0 {
		q.maxMsgs = f.MaxMessages
	}
	if f.DedupeWindowMillis != 0 {
		q.dedupe = true
	}
	d := &wire.Declared{Corr: f.Corr, Queue: q.name, Durability: q.durability, Partitions: q.partitions, Created: created}
	if q.durability == wire.DurabilityBuffered {
		d.Warning = "buffered: confirmed messages can be lost on power loss"
	}
	return d
}

func (s *fakeServer) publishLocked(f *wire.Publish) wire.Frame {
	q := s.queues[f.Queue]
	if q == nil {
		return &wire.Error{Corr: f.Corr, Code: wire.CodeNotFound, Message: "no queue " + f.Queue}
	}
	if q.dedupe && f.MessageID != "" {
		if off, ok := q.ids[f.MessageID]; ok {
			return &wire.Confirm{Corr: f.Corr, Offset: off, Duplicate: true}
		}
	}
	held := 0
	for _, sub := range q.subs {
		held += len(sub.held)
	}
	if q.maxMsgs != 0 && uint64(len(q.ready)+held) >= q.maxMsgs {
		return &wire.Error{Corr: f.Corr, Code: wire.CodeQueueFull, Message: "queue full"}
	}
	m := &fakeMsg{offset: q.next, id: f.MessageID, headers: f.Headers, body: f.Body}
	q.next++
	q.ready = append(q.ready, m)
	if q.dedupe && f.MessageID != "" {
		q.ids[f.MessageID] = m.offset
	}
	defer s.dispatchLocked(q)
	return &wire.Confirm{Corr: f.Corr, Offset: m.offset}
}

func (s *fakeServer) settleLocked(fc *fakeConn, subID uint32, tags []uint64, then func(*fakeQueue, *fakeMsg)) {
	sub := fc.subs[subID]
	for _, tag := range tags {
		var m *fakeMsg
		if sub != nil {
			m = sub.held[tag]
		}
		if m == nil {
			fc.send(&wire.SettleError{SubID: subID, Tag: tag, Code: wire.CodeStaleTag, Message: "stale"})
			continue
		}
		delete(sub.held, tag)
		then(sub.q, m)
	}
	if sub != nil {
		s.dispatchLocked(sub.q)
	}
}

// dispatchLocked delivers ready messages to subscriptions with room in
// their window, in queue order.
func (s *fakeServer) dispatchLocked(q *fakeQueue) {
	for len(q.ready) > 0 {
		var to *fakeSub
		for _, sub := range q.subs {
			if uint32(len(sub.held)) < sub.window {
				to = sub
				break
			}
		}
		if to == nil {
			return
		}
		m := q.ready[0] // published at fakePublishedAt plus its offset, in ns
		q.ready = q.ready[1:]
		m.deliveries++
		s.nextTag++
		to.held[s.nextTag] = m
		to.fc.send(&wire.Deliver{SubID: to.id, Tag: s.nextTag, Offset: m.offset, Deliveries: m.deliveries,
			MessageID: m.id, Headers: m.headers, Body: m.body, PublishedAt: fakePublishedAt + int64(m.offset)})
	}
}
