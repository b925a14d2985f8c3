package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// frameTap decodes the frames flowing one way through a connection, from
// byte chunks as they come, and hands each to a callback.
type frameTap struct {
	buf []byte
	on  func(Frame)
}

func (t *frameTap) feed(p []byte) error {
	t.buf = append(t.buf, p...)
	for len(t.buf) >= 4 {
		n := int(binary.LittleEndian.Uint32(t.buf))
		if len(t.buf) < 4+n {
			return nil
		}
		fr, err := decodeFrame(t.buf[4 : 4+n])
		if err != nil {
			return err
		}
		t.on(fr)
		t.buf = t.buf[4+n:]
	}
	return nil
}

// spyConn is the owner's end of a stream, seeing every frame: Write the
// owner's, Read the follower's (before the sender gets them).
type spyConn struct {
	net.Conn
	out, in *frameTap
	hold    *atomic.Pointer[writeHold]
}

// writeHold stops the owner's writes: blocked closes when one waits,
// release lets them go on.
type writeHold struct {
	blocked, release chan struct{}
	once             sync.Once
}

func (c *spyConn) Write(p []byte) (int, error) {
	if h := c.hold.Load(); h != nil {
		h.once.Do(func() { close(h.blocked) })
		<-h.release
	}
	if err := c.out.feed(p); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *spyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if ferr := c.in.feed(p[:n]); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}

// pullWatch checks the catch-up protocol on the wire: a catch-up batch is
// followed by nothing from the owner until the follower's Pull, and every
// Pull comes from a copy whose written and durable frontiers both stand
// at its from (the batch before it is synced).
type pullWatch struct {
	copy func() *wal.Log
	hold atomic.Pointer[writeHold]

	mu             sync.Mutex // guards the fields below
	owed           bool       // a catch-up batch went out, its Pull not yet
	catchUp, push  int        // batches seen
	pulls          int
	pushRecords    int  // records that came in push batches
	aheadReported  bool // a Position with written past durable after catch-up
	violations     []string
	lastCatchUpEnd uint64
}

func (p *pullWatch) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := dialTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.owed = false // a new stream starts afresh
	p.mu.Unlock()
	return &spyConn{Conn: c, out: &frameTap{on: p.sent}, in: &frameTap{on: p.received}, hold: &p.hold}, nil
}

func (p *pullWatch) sent(fr Frame) {
	b, ok := fr.(Batch)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owed {
		p.violations = append(p.violations, fmt.Sprintf("batch at %d sent before the pull", b.First))
	}
	if b.CatchUp {
		p.catchUp++
		p.owed = true
		p.lastCatchUpEnd = b.First + uint64(len(b.Records))
	} else {
		p.push++
		p.pushRecords += len(b.Records)
	}
}

func (p *pullWatch) received(fr Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f := fr.(type) {
	case Pull:
		p.pulls++
		p.owed = false
		l := p.copy()
		if w, d := l.WrittenNext(), l.DurableNext(); w != f.From || d != f.From || f.From != p.lastCatchUpEnd {
			p.violations = append(p.violations, fmt.Sprintf("pull from %d: copy written %d durable %d, catch-up batch ended at %d",
				f.From, w, d, p.lastCatchUpEnd))
		}
	case Position:
		if p.catchUp > 0 && f.Written > f.Durable {
			p.aheadReported = true
		}
	}
}

func (p *pullWatch) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.violations {
		t.Error(v)
	}
}

func testRecord(i int) wal.Entry {
	return wal.Entry{Type: 1 + byte(i%3), Payload: []byte(fmt.Sprintf("record-%08d-%s", i, strings.Repeat("x", 80)))}
}

func appendRecords(t *testing.T, l *wal.Log, from, n int, d wal.Boundary) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := from; i < from+n; i += 100 {
		var batch []wal.Entry
		for j := i; j < min(i+100, from+n); j++ {
			batch = append(batch, testRecord(j))
		}
		if _, err := l.Append(ctx, batch, d); err != nil {
			t.Fatal(err)
		}
	}
}

func sameRecords(t *testing.T, what string, got, want []wal.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || got[i].Type != want[i].Type || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("%s: record %d differs: %+v vs %+v", what, i, got[i], want[i])
		}
	}
}

func waitGate(t *testing.T, g *Gate, next uint64) {
	t.Helper()
	stop := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { close(stop) })
	defer timer.Stop()
	if err := g.Wait(stop, next); err != nil {
		t.Fatalf("gate at %d: %v (%s, positions %v)", next, err, g.Pending(next), g.Positions())
	}
}

// A buffered queue's follower 20,000 records behind, below the owner's
// small tail cache, catches up through pulls, each batch synced before
// the next is asked for; then the stream goes back to push, and the copy
// equals the owner's log.
func TestCatchUpThroughPull(t *testing.T) {
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), SegmentSize: 256 << 10,
		TailCacheBytes: 64 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	const behind = 20000
	appendRecords(t, owner, 0, behind, wal.AfterFlush)
	if from, _ := owner.CachedFrom(); from < behind-2000 {
		t.Fatalf("the owner's tail cache holds from %d: too much for the test", from)
	}
	missesBefore := owner.Status().TailCacheMisses

	f := NewFollower(FollowerOptions{Dir: "r", FS: vfs.NewMem(), SegmentSize: 256 << 10,
		BackgroundSyncInterval: -1, PullBytes: 32 << 10, Logger: quiet})
	addr := serveFollower(t, f)
	watch := &pullWatch{copy: func() *wal.Log { l, _ := f.Log("q", 0); return l }}
	gate := NewGate(Written, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q"}, Follower: "f1", Addr: addr, Dial: watch.dial,
		Log: owner, Gate: gate, MaxBatchBytes: 64 << 10, Logger: quiet})
	defer s.Close()

	waitGate(t, gate, behind)
	watch.check(t)
	st := s.Stats()
	watch.mu.Lock()
	catchUp, pulls, push := watch.catchUp, watch.pulls, watch.push
	watch.mu.Unlock()
	// 20,000 records of about 100 bytes, in pulls of 32 KiB: some 60 rounds.
	if catchUp < 40 || pulls != catchUp || st.Pulls != uint64(pulls) || st.CatchUpBatches != uint64(catchUp) {
		t.Fatalf("catch-up batches %d, pulls seen %d, stats %+v", catchUp, pulls, st)
	}
	if st.CatchingUp || push == 0 {
		t.Fatalf("after catching up: stats %+v, %d push batches", st, push)
	}
	if m := owner.Status().TailCacheMisses - missesBefore; m < behind/2 {
		t.Fatalf("catch-up read %d records from segment files, want most of %d", m, behind)
	}

	// New records arrive by push, appended AfterFlush: with the copy's
	// background sync off, its written frontier runs ahead of its durable.
	appendRecords(t, owner, behind, 500, wal.AfterFlush)
	waitGate(t, gate, behind+500)
	watch.check(t)
	l, _ := f.Log("q", 0)
	if w, d := l.WrittenNext(), l.DurableNext(); w != behind+500 || d >= w {
		t.Fatalf("copy after push: written %d durable %d", w, d)
	}
	if p := gate.Positions()["f1"]; p.Durable >= p.Written {
		t.Fatalf("gate after push: %+v, want written ahead of durable", p)
	}
	watch.mu.Lock()
	ahead, pushRecords, catchUpAfter := watch.aheadReported, watch.pushRecords, watch.catchUp
	watch.mu.Unlock()
	if !ahead || pushRecords < 500 || catchUpAfter != catchUp {
		t.Fatalf("after push: written-ahead reported %v, %d pushed records, catch-up batches %d then %d",
			ahead, pushRecords, catchUp, catchUpAfter)
	}
	sameRecords(t, "copy", waltest.Records(t, l, behind+500), waltest.Records(t, owner, behind+500))
}

// A pushed stream that falls far behind the owner's writes (here: held in
// a write while the owner writes 10,000 records) switches to catch-up,
// then back to push.
func TestPushFallsBackToCatchUp(t *testing.T) {
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), SegmentSize: 256 << 10,
		TailCacheBytes: 64 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	f := NewFollower(FollowerOptions{Dir: "r", FS: vfs.NewMem(), SegmentSize: 256 << 10, Logger: quiet})
	addr := serveFollower(t, f)
	watch := &pullWatch{copy: func() *wal.Log { l, _ := f.Log("q", 0); return l }}
	gate := NewGate(Written, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q"}, Follower: "f1", Addr: addr, Dial: watch.dial,
		Log: owner, Gate: gate, MaxBatchBytes: 64 << 10, Logger: quiet})
	defer s.Close()
	appendRecords(t, owner, 0, 100, wal.AfterFlush)
	waitGate(t, gate, 100)
	if st := s.Stats(); st.CatchUpBatches != 0 || st.PushBatches == 0 {
		t.Fatalf("a follower close behind was not pushed to: %+v", st)
	}

	h := &writeHold{blocked: make(chan struct{}), release: make(chan struct{})}
	watch.hold.Store(h)
	appendRecords(t, owner, 100, 1, wal.AfterFlush)
	select {
	case <-h.blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the sender never wrote record 100")
	}
	appendRecords(t, owner, 101, 10000, wal.AfterFlush)
	watch.hold.Store(nil)
	close(h.release)
	waitGate(t, gate, 10101)
	watch.check(t)
	watch.mu.Lock()
	catchUp, pulls := watch.catchUp, watch.pulls
	watch.mu.Unlock()
	if st := s.Stats(); catchUp == 0 || pulls != catchUp || st.CatchingUp {
		t.Fatalf("after falling behind: %d catch-up batches, %d pulls, stats %+v", catchUp, pulls, st)
	}
	l, _ := f.Log("q", 0)
	sameRecords(t, "copy", waltest.Records(t, l, 10101), waltest.Records(t, owner, 10101))
}

// readFrom reads l from offset from to its written end.
func readFrom(t *testing.T, l *wal.Log, from uint64) []wal.Record {
	t.Helper()
	var out []wal.Record
	for from < l.WrittenNext() {
		recs, err := l.ReadWritten(from, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
	return out
}

// An empty follower of a log whose retention has moved the head starts
// its copy at the owner's head, holds exactly the owner's records from
// there on, and its positions reach the gate.
func TestFollowerStartsAtOwnersHead(t *testing.T) {
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), SegmentSize: 16 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	appendRecords(t, owner, 0, 3000, wal.AfterFsync)
	const head = 2000
	if err := owner.AdvanceHead(head); err != nil {
		t.Fatal(err)
	}
	f := NewFollower(FollowerOptions{Dir: "r", FS: vfs.NewMem(), SegmentSize: 16 << 10, Logger: quiet})
	gate := NewGate(Durable, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Durability: appliance.Durable, Queue: "q"}, Follower: "f1",
		Addr: serveFollower(t, f), Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
	defer s.Close()
	waitGate(t, gate, 3000)
	appendRecords(t, owner, 3000, 200, wal.AfterFsync)
	waitGate(t, gate, 3200)

	l, ok := f.Log("q", 0)
	if !ok {
		t.Fatal("no copy")
	}
	if h, d := l.Head(), l.DurableNext(); h != head || d != 3200 {
		t.Fatalf("copy head %d durable %d, want %d and 3200", h, d, head)
	}
	if _, err := l.ReadWritten(head-1, 1<<10); !errors.Is(err, wal.ErrBeforeHead) {
		t.Fatalf("read below the copy's head: %v", err)
	}
	sameRecords(t, "copy", readFrom(t, l, head), readFrom(t, owner, head))
}

// A copy holding records that all lie before the owner's head (its node
// was down while the owner's retention passed it) is rebuilt from the
// head: its records go, it starts empty at the head, and it is no witness
// until it holds the owner's end as of the stream's Hello. Fed by a
// sender, it then holds exactly the owner's records from the head on and
// seals as a witness.
func TestFollowerRebuildsCopyBehindHead(t *testing.T) {
	fs := vfs.NewMem()
	pre, err := wal.Open(fs.PathJoin("r", "q", "0", "0"), // incarnation 0, partition 0
		wal.Options{FS: fs, SegmentSize: 16 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, pre, 0, 300, wal.AfterFsync) // more than one segment
	if err := pre.Close(); err != nil {
		t.Fatal(err)
	}
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), SegmentSize: 16 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	appendRecords(t, owner, 0, 3000, wal.AfterFsync)
	const head = 2000
	if err := owner.AdvanceHead(head); err != nil {
		t.Fatal(err)
	}

	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, SegmentSize: 16 << 10, Logger: quiet})
	defer f.Close()
	// A stream that ends right after the follower's answer: the copy is
	// rebuilt, and holds nothing yet.
	ownerEnd, followerEnd := net.Pipe()
	served := make(chan struct{})
	go func() { defer close(served); f.Serve(followerEnd) }()
	if _, err := ownerEnd.Write(appendFrame(nil, Hello{Epoch: 1, Queue: "q", Head: head, End: 3000})); err != nil {
		t.Fatal(err)
	}
	fr, err := readFrame(bufio.NewReader(ownerEnd))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := fr.(Position); !ok || p.Written != head {
		t.Fatalf("the follower's answer to a Hello past its copy: %#v, want its position at %d", fr, head)
	}
	ownerEnd.Close()
	<-served
	l, _ := f.Log("q", 0)
	if h, w := l.Head(), l.WrittenNext(); h != head || w != head {
		t.Fatalf("rebuilt copy: head %d written %d, want both %d", h, w, head)
	}
	res, err := f.Seal(t.Context(), CopyID{Queue: "q"}, 2)
	if err != nil || res.Witness || res.End != head {
		t.Fatalf("seal of the copy being rebuilt: %+v, %v; want no witness at %d", res, err, head)
	}

	// A sender at the seal's epoch fills it from the head.
	gate := NewGate(Durable, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 2, Durability: appliance.Durable, Queue: "q"}, Follower: "f1",
		Addr: serveFollower(t, f), Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
	waitGate(t, gate, 3000)
	s.Close()
	l, _ = f.Log("q", 0)
	sameRecords(t, "rebuilt copy", readFrom(t, l, head), readFrom(t, owner, head))
	res, err = f.Seal(t.Context(), CopyID{Queue: "q"}, 3)
	if err != nil || !res.Witness || res.End != 3000 {
		t.Fatalf("seal of the rebuilt copy: %+v, %v; want a witness at 3000", res, err)
	}
}

func TestSplitBatch(t *testing.T) {
	rec := func(n int) wal.Entry { return wal.Entry{Type: 1, Payload: make([]byte, n)} }
	size := int64(wal.RecordSize(100))
	for _, tc := range []struct {
		name    string
		entries []wal.Entry
		limit   int64
		want    []int // part lengths
	}{
		{"fits", []wal.Entry{rec(100), rec(100)}, 2 * size, []int{2}},
		{"split", []wal.Entry{rec(100), rec(100), rec(100)}, 2 * size, []int{2, 1}},
		{"one per part", []wal.Entry{rec(100), rec(100)}, size, []int{1, 1}},
		{"oversized alone", []wal.Entry{rec(100), rec(1000), rec(100)}, 2 * size, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := splitBatch(tc.entries, tc.limit)
			var got []int
			for _, p := range parts {
				got = append(got, len(p))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("parts %v, want %v", got, tc.want)
			}
		})
	}
}

// A copy is live (its seal not cut) only once a stream has brought it to
// the owner's end in this process: opened again from disk by a new
// process it may have lost what it had not synced, and it seals cut until
// a stream makes it complete again.
func TestCopyIsLiveOnceCaughtUp(t *testing.T) {
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	appendRecords(t, owner, 0, 100, wal.AfterFlush)
	fs := vfs.NewMem()
	id := CopyID{Queue: "q", Partition: 0}
	follow := func(f *Follower, epoch uint64) {
		gate := NewGate(Written, 2, []string{"f1"})
		s := StartSender(SenderOptions{Hello: Hello{Epoch: epoch, Queue: "q"}, Follower: "f1", Addr: serveFollower(t, f),
			Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
		defer s.Close()
		waitGate(t, gate, owner.WrittenNext())
	}
	seal := func(f *Follower, epoch uint64) SealResult {
		res, err := f.Seal(t.Context(), id, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet})
	follow(f, 1)
	if res := seal(f, 2); res.Cut || res.End != 100 || res.Acked != 100 {
		t.Fatalf("seal of a copy that caught up in this process: %+v, want live at 100", res)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// A new process: the same copy, opened from disk.
	f = NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet})
	defer f.Close()
	if res := seal(f, 3); !res.Cut {
		t.Fatalf("seal of a copy opened from disk by a new process: %+v, want cut", res)
	}
	appendRecords(t, owner, 100, 10, wal.AfterFlush)
	follow(f, 4)
	if res := seal(f, 5); res.Cut || res.End != 110 {
		t.Fatalf("seal after a stream brought the copy to the owner's end: %+v, want live at 110", res)
	}
}

// A copy live when its process stopped is live again after a restart
// under the same continuity token (a crash: the page cache kept what it
// wrote), and not after one under another token (a power loss, a reboot,
// a file system mounted again).
func TestLiveCopyAcrossRestarts(t *testing.T) {
	owner, err := wal.Open("owner", wal.Options{FS: vfs.NewMem(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	appendRecords(t, owner, 0, 50, wal.AfterFlush)
	fs := vfs.NewMem()
	id := CopyID{Queue: "q", Partition: 0}
	open := func(token string) *Follower {
		return NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet, Continuity: func(string) string { return token }})
	}
	f := open("boot-1/mount-7")
	gate := NewGate(Written, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q"}, Follower: "f1", Addr: serveFollower(t, f),
		Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
	waitGate(t, gate, 50)
	s.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	epoch := uint64(1)
	for _, tc := range []struct {
		token string
		live  bool
	}{{"boot-1/mount-7", true}, {"boot-1/mount-7", true}, {"boot-2/mount-7", false}, {"boot-1/mount-7", false}} {
		f := open(tc.token)
		epoch++
		res, err := f.Seal(t.Context(), id, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Cut == tc.live {
			t.Fatalf("seal after a restart under %q: cut %v, want live %v", tc.token, res.Cut, tc.live)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
