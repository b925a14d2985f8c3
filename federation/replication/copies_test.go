package replication

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// helloConn opens a raw stream to addr, sends h and returns the
// connection with the follower's first answer.
func helloConn(t *testing.T, addr string, h Hello) (net.Conn, *bufio.Reader, Frame) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(appendFrame(nil, h)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	fr, err := readFrame(br)
	if err != nil {
		t.Fatalf("answer to %+v: %v", h, err)
	}
	return c, br, fr
}

// wantRefuse checks a follower refused h with a reason containing want.
func wantRefuse(t *testing.T, addr string, h Hello, want string) {
	t.Helper()
	_, _, fr := helloConn(t, addr, h)
	r, ok := fr.(Refuse)
	if !ok || !strings.Contains(r.Reason, want) {
		t.Fatalf("hello %+v answered %#v, want a refusal naming %q", h, fr, want)
	}
}

// assignment is a fake control state: what Accept and Keep consult.
type assignment struct {
	mu          sync.Mutex
	owner       string
	incarnation uint64
}

func (a *assignment) set(owner string, inc uint64) {
	a.mu.Lock()
	a.owner, a.incarnation = owner, inc
	a.mu.Unlock()
}

func (a *assignment) accept(_ context.Context, h Hello) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case h.Queue != "q" || h.Partition != 0:
		return fmt.Errorf("not a follower of %s/%d", h.Queue, h.Partition)
	case h.Owner != a.owner:
		return fmt.Errorf("owned by %s, not %s", a.owner, h.Owner)
	case h.Incarnation != a.incarnation:
		return fmt.Errorf("incarnation %d, not %d", a.incarnation, h.Incarnation)
	}
	return nil
}

func (a *assignment) keep(id CopyID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return id.Queue == "q" && id.Partition == 0 && id.Incarnation == a.incarnation
}

// The Accept hook decides before any copy opens: a Hello from another
// owner or for a partition this node does not follow is refused with the
// hook's reason, and nothing appears on disk.
func TestFollowerAcceptsOnlyAssignedStreams(t *testing.T) {
	fs := vfs.NewMem()
	a := &assignment{owner: "o", incarnation: 5}
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet, Accept: a.accept, Keep: a.keep})
	addr := serveFollower(t, f)
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q", Owner: "intruder"}, "owned by o, not intruder")
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q", Partition: 1, Owner: "o"}, "not a follower of q/1")
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 4, Queue: "q", Owner: "o"}, "incarnation 5, not 4")
	if ids, err := f.Copies(); err != nil || len(ids) != 0 {
		t.Fatalf("copies after refusals: %v %v", ids, err)
	}
	if _, ok := f.Log("q", 0); ok {
		t.Fatal("a refused stream opened a copy")
	}
	// The assigned owner gets in, and its copy lives under the incarnation.
	_, _, fr := helloConn(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q", Owner: "o"})
	if p, ok := fr.(Position); !ok || p != (Position{}) {
		t.Fatalf("assigned owner answered %#v", fr)
	}
	if ids, err := f.Copies(); err != nil || !slices.Equal(ids, []CopyID{{"q", 5, 0}}) {
		t.Fatalf("copies: %v %v", ids, err)
	}
	if _, err := fs.Stat(fs.PathJoin("r", "q", "5", "0")); err != nil {
		t.Fatalf("copy directory: %v", err)
	}
}

// A stream is taken only from the node its peer's certificate names: a
// Hello claiming another owner is refused before anything opens.
func TestFollowerTakesStreamsOnlyFromTheNamedPeer(t *testing.T) {
	fs := vfs.NewMem()
	a := &assignment{owner: "o", incarnation: 5}
	var peer atomic.Value // what the connection's certificate says
	peer.Store("n2")
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet, Accept: a.accept, Keep: a.keep,
		PeerID: func(net.Conn) (string, bool) { return peer.Load().(string), true }})
	addr := serveFollower(t, f)
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q", Owner: "o"}, `names node "n2", not the owner "o"`)
	if _, ok := f.Log("q", 0); ok {
		t.Fatal("a stream from an impostor opened a copy")
	}
	peer.Store("o")
	if _, _, fr := helloConn(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q", Owner: "o"}); fr.(Position) != (Position{}) {
		t.Fatalf("the owner itself answered %#v", fr)
	}
}

// A queue declared again has a new incarnation: a stream for it removes
// the old copy (records and directory) and starts an empty one; a stream
// for the old incarnation is then refused as stale.
func TestNewIncarnationReplacesCopy(t *testing.T) {
	fs := vfs.NewMem()
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, SegmentSize: 256 << 10, Logger: quiet})
	addr := serveFollower(t, f)
	owner := openLog(t, vfs.NewMem(), "owner")
	fill(t, owner, 20)
	gate := NewGate(Written, 2, []string{"f"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Incarnation: 5, Queue: "q"}, Follower: "f", Addr: addr,
		Dial: dialTCP, Log: owner, Gate: gate, Retry: time.Millisecond, Logger: quiet})
	waitGate(t, gate, 20)
	s.Close()

	_, _, fr := helloConn(t, addr, Hello{Epoch: 1, Incarnation: 9, Queue: "q"})
	if p, ok := fr.(Position); !ok || p != (Position{}) {
		t.Fatalf("new incarnation answered %#v, want an empty copy", fr)
	}
	if _, err := fs.Stat(fs.PathJoin("r", "q", "5")); err == nil {
		t.Fatal("the old incarnation's directory is still there")
	}
	if ids, _ := f.Copies(); !slices.Equal(ids, []CopyID{{"q", 9, 0}}) {
		t.Fatalf("copies %v, want only incarnation 9", ids)
	}
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 5, Queue: "q"}, "stale queue incarnation")
}

// copiesOnDisk leaves a closed copy of one synced record in each dir.
func copiesOnDisk(t *testing.T, fs vfs.FS, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		l, err := wal.Open(dir, wal.Options{FS: fs, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(context.Background(), []wal.Entry{{Type: 1, Payload: []byte("x")}}, wal.AfterFsync); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
}

// Collect removes what Keep rejects, open or only on disk: the open
// copy's stream ends, its log closes and its directory goes; a stream for
// it afterwards is refused. Copies Keep accepts stay.
func TestCollectRemovesCopies(t *testing.T) {
	fs := vfs.NewMem()
	// A copy left on disk by an earlier run, of an incarnation long gone,
	// and one of a queue still followed.
	copiesOnDisk(t, fs, "r/old/3/0", "r/q/7/1")
	var mu sync.Mutex
	keep := map[CopyID]bool{{"q", 7, 0}: true, {"q", 7, 1}: true}
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet, Keep: func(id CopyID) bool {
		mu.Lock()
		defer mu.Unlock()
		return keep[id]
	}})
	addr := serveFollower(t, f)
	if ids, _ := f.Copies(); !slices.Equal(ids, []CopyID{{"old", 3, 0}, {"q", 7, 1}}) {
		t.Fatalf("copies on disk at start: %v", ids)
	}
	c, br, fr := helloConn(t, addr, Hello{Epoch: 1, Incarnation: 7, Queue: "q"})
	if _, ok := fr.(Position); !ok {
		t.Fatalf("answer %#v", fr)
	}
	removed, err := f.Collect()
	if err != nil || !slices.Equal(removed, []CopyID{{"old", 3, 0}}) {
		t.Fatalf("first collect removed %v (%v)", removed, err)
	}
	mu.Lock()
	delete(keep, CopyID{"q", 7, 0})
	mu.Unlock()
	removed, err = f.Collect()
	if err != nil || !slices.Equal(removed, []CopyID{{"q", 7, 0}}) {
		t.Fatalf("second collect removed %v (%v)", removed, err)
	}
	// The stream was ended by the removal.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := readFrame(br); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stream of a removed copy still open: %v", err)
	}
	if _, ok := f.Log("q", 0); ok {
		t.Fatal("removed copy still open")
	}
	if ids, _ := f.Copies(); !slices.Equal(ids, []CopyID{{"q", 7, 1}}) {
		t.Fatalf("copies after collect: %v", ids)
	}
	if names, _ := fs.List("r"); !slices.Equal(names, []string{"q"}) {
		t.Fatalf("replica dir holds %v, want only q", names)
	}
	wantRefuse(t, addr, Hello{Epoch: 1, Incarnation: 7, Queue: "q"}, "no longer keeps")
	if err := f.Remove("q", 1); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.List("r"); len(names) != 0 {
		t.Fatalf("replica dir holds %v after removing every copy", names)
	}
}

// A copy Keep rejects but that is in use elsewhere (the broker's open
// log) stays through Collect and CollectAmong, and goes at the first
// collection after it is not; CollectAmong looks only at what it is told.
func TestCollectLeavesCopiesInUse(t *testing.T) {
	fs := vfs.NewMem()
	copiesOnDisk(t, fs, "r/q/7/0", "r/other/2/0")
	var inUse atomic.Bool
	inUse.Store(true)
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet,
		Keep:  func(CopyID) bool { return false },
		InUse: func(id CopyID) bool { return id.Queue == "q" && inUse.Load() }})
	t.Cleanup(func() { f.Close() })
	if removed, err := f.CollectAmong([]CopyID{{"q", 7, 0}}, nil); err != nil || len(removed) != 0 {
		t.Fatalf("CollectAmong removed %v (%v) of a copy in use", removed, err)
	}
	inUse.Store(false)
	if removed, err := f.CollectAmong(nil, []string{"q"}); err != nil || !slices.Equal(removed, []CopyID{{"q", 7, 0}}) {
		t.Fatalf("CollectAmong of queue q removed %v (%v), want q/7/0", removed, err)
	}
	if ids, _ := f.Copies(); !slices.Equal(ids, []CopyID{{"other", 2, 0}}) {
		t.Fatalf("copies %v: CollectAmong went beyond the queue it was given", ids)
	}
	if removed, err := f.Collect(); err != nil || !slices.Equal(removed, []CopyID{{"other", 2, 0}}) {
		t.Fatalf("Collect removed %v (%v)", removed, err)
	}
}

// Remove during a live stream with a sender pushing: the sender's stream
// ends, it reconnects, and (Keep still accepting) the copy starts again
// from empty and catches up to the owner's log.
func TestRemoveDuringStream(t *testing.T) {
	fs := vfs.NewMem()
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, SegmentSize: 256 << 10, Logger: quiet})
	addr := serveFollower(t, f)
	owner := openLog(t, vfs.NewMem(), "owner")
	gate := NewGate(Written, 2, []string{"f"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Incarnation: 2, Queue: "q"}, Follower: "f", Addr: addr,
		Dial: dialTCP, Log: owner, Gate: gate, Retry: time.Millisecond, Logger: quiet})
	defer s.Close()
	fill(t, owner, 100)
	waitGate(t, gate, 100)
	if err := f.Remove("q", 0); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 100)
	waitGate(t, gate, 200)
	l, ok := f.Log("q", 0)
	if !ok || l.Head() != 0 || l.WrittenNext() != 200 {
		t.Fatalf("copy after its removal: open %v", ok)
	}
	want, got := waltest.Records(t, owner, 200), waltest.Records(t, l, 200)
	for i := range want {
		if !bytes.Equal(want[i].Payload, got[i].Payload) {
			t.Fatalf("record %d differs after the copy came back", i)
		}
	}
}

// fill appends n records to l.
func fill(t *testing.T, l *wal.Log, n int) {
	t.Helper()
	var batch []wal.Entry
	for i := range n {
		batch = append(batch, wal.Entry{Type: 1, Payload: []byte(fmt.Sprintf("rec-%d", i))})
	}
	if _, err := l.Append(context.Background(), batch, wal.AfterFlush); err != nil {
		t.Fatal(err)
	}
}

// The owner's stream stats say why the follower refuses it while it does,
// and nothing once a handshake is accepted again.
func TestSenderReportsRefusalWhileItLasts(t *testing.T) {
	a := &assignment{owner: "someone else", incarnation: 5}
	f := NewFollower(FollowerOptions{Dir: "r", FS: vfs.NewMem(), Logger: quiet, Accept: a.accept, Keep: a.keep})
	addr := serveFollower(t, f)
	owner := openLog(t, vfs.NewMem(), "owner")
	fill(t, owner, 5)
	gate := NewGate(Written, 2, []string{"f"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Incarnation: 5, Queue: "q", Owner: "o"}, Follower: "f", Addr: addr,
		Dial: dialTCP, Log: owner, Gate: gate, Retry: time.Millisecond, Logger: quiet})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	await.Until(t, ctx, "the refusal to show", func() bool {
		st := s.Stats()
		return st.Refusals > 0 && strings.Contains(st.LastRefusal, "owned by someone else")
	})
	a.set("o", 5)
	waitGate(t, gate, 5)
	if st := s.Stats(); st.LastRefusal != "" || st.Refusals == 0 {
		t.Fatalf("after an accepted handshake: %+v", st)
	}
}

// A follower that takes the connection and never answers the Hello (a
// wedged peer) does not hold the stream: the sender gives up on it
// within HelloTimeout and connects again.
func TestSenderRedialsAFollowerThatNeverAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // read nothing, answer nothing
		}
	}()
	owner := openLog(t, vfs.NewMem(), "owner")
	fill(t, owner, 5)
	gate := NewGate(Written, 2, []string{"f"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q", Owner: "o"}, Follower: "f", Addr: ln.Addr().String(),
		Dial: dialTCP, Log: owner, Gate: gate, Retry: time.Millisecond, HelloTimeout: 50 * time.Millisecond, Logger: quiet})
	defer s.Close()
	deadline := time.After(time.Minute)
	for n := 0; n < 2; n++ {
		select {
		case c := <-accepted:
			defer c.Close()
		case <-deadline:
			t.Fatalf("the sender connected %d times to a follower that never answers, want 2", n)
		}
	}
}
