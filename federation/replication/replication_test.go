package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/leakcheck"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serveFollower listens on loopback and hands every connection to f.
func serveFollower(t *testing.T, f *Follower) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.Serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; f.Close() })
	return ln.Addr().String()
}

func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func openLog(t *testing.T, fs vfs.FS, dir string) *wal.Log {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{FS: fs, SegmentSize: 256 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Two followers receive every record at the owner's offsets; a durable
// gate opens only once both have synced, and the copies equal the
// owner's log record for record.
func TestStreamToFollowers(t *testing.T) {
	owner := openLog(t, vfs.NewMem(), "owner")
	gate := NewGate(Durable, 3, []string{"f1", "f2"})
	followers := map[string]*Follower{}
	for _, id := range []string{"f1", "f2"} {
		f := NewFollower(FollowerOptions{Dir: "replicas", FS: vfs.NewMem(), SegmentSize: 256 << 10, Logger: quiet})
		followers[id] = f
		s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Durability: appliance.Durable, Queue: "q", Partition: 0, Owner: "o"},
			Follower: id, Addr: serveFollower(t, f), Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
		defer s.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 5000
	for i := 0; i < n; i += 50 {
		var batch []wal.Entry
		for j := i; j < i+50; j++ {
			batch = append(batch, wal.Entry{Type: 1 + byte(j%3), Payload: []byte(fmt.Sprintf("record-%d", j))})
		}
		res, err := owner.Append(ctx, batch, wal.AfterFsync)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		time.AfterFunc(30*time.Second, func() { close(stop) })
		if err := gate.Wait(stop, res.Next); err != nil {
			t.Fatalf("gate at %d: %v (%s)", res.Next, err, gate.Pending(res.Next))
		}
		for id, p := range gate.Positions() {
			if p.Durable < res.Next {
				t.Fatalf("gate opened at %d with %s durable at %d", res.Next, id, p.Durable)
			}
		}
	}
	want := waltest.Records(t, owner, n)
	for id, f := range followers {
		l, ok := f.Log("q", 0)
		if !ok {
			t.Fatalf("%s has no copy", id)
		}
		if l.DurableNext() < n {
			t.Fatalf("%s durable at %d, want %d", id, l.DurableNext(), n)
		}
		got := waltest.Records(t, l, n)
		for i := range want {
			if got[i].Offset != want[i].Offset || got[i].Type != want[i].Type || !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("%s record %d differs: %+v vs %+v", id, i, got[i], want[i])
			}
		}
	}
}

// A follower that restarts (stream cut) resumes from its own end.
func TestResumeAfterCut(t *testing.T) {
	owner := openLog(t, vfs.NewMem(), "owner")
	gate := NewGate(Written, 2, []string{"f1"})
	f := NewFollower(FollowerOptions{Dir: "r", FS: vfs.NewMem(), Logger: quiet})
	addr := serveFollower(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q"}, Follower: "f1", Addr: addr, Dial: dialTCP,
		Log: owner, Gate: gate, Retry: time.Millisecond, Logger: quiet})
	defer s.Close()
	stop := make(chan struct{})
	defer close(stop)
	for round := 0; round < 5; round++ {
		res, err := owner.Append(ctx, []wal.Entry{{Type: 1, Payload: []byte{byte(round)}}}, wal.AfterFlush)
		if err != nil {
			t.Fatal(err)
		}
		if err := gate.Wait(stop, res.Next); err != nil {
			t.Fatal(err)
		}
		// Cut the stream: the sender reconnects and the copy goes on from
		// its end without a gap or a duplicate.
		f.mu.Lock()
		for _, r := range f.replicas {
			if r.stream != nil {
				r.stream.Close()
			}
		}
		f.mu.Unlock()
	}
	l, _ := f.Log("q", 0)
	if got := waltest.Records(t, l, 5); got[4].Payload[0] != 4 || l.WrittenNext() != 5 {
		t.Fatalf("copy after cuts: next %d, last %v", l.WrittenNext(), got[4])
	}
}

func TestGateCounts(t *testing.T) {
	g := NewGate(Written, 2, []string{"a", "b"})
	if c := g.Ceiling(); c != 0 {
		t.Fatalf("ceiling %d before any report", c)
	}
	g.Update("a", Position{Written: 10, Durable: 2})
	if c := g.Ceiling(); c != 10 {
		t.Fatalf("written ceiling %d, want 10", c)
	}
	g.Update("a", Position{Written: 5, Durable: 1}) // stale report
	if c, f := g.Ceiling(), g.Floor(0); c != 10 || f != 0 {
		t.Fatalf("after a stale report: ceiling %d floor %d", c, f)
	}
	d := NewGate(Durable, 3, []string{"a", "b"})
	d.Update("a", Position{Written: 10, Durable: 7})
	d.Update("b", Position{Written: 10, Durable: 4})
	if c, f := d.Ceiling(), d.Floor(0); c != 4 || f != 4 {
		t.Fatalf("durable ceiling %d floor %d, want 4 and 4 (written never counts)", c, f)
	}
	stop := make(chan struct{})
	close(stop)
	if err := d.Wait(stop, 5); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait past the ceiling: %v", err)
	}
	if s := d.Pending(5); s != "durable on 2 of 3 copies, the policy needs 3" {
		t.Fatalf("Pending = %q", s)
	}
	if c := NewGate(Durable, 1, nil).Ceiling(); c != ^uint64(0) {
		t.Fatalf("owner-only ceiling %d", c)
	}
	if c := NewGate(Durable, 3, []string{"a"}).Ceiling(); c != 0 {
		t.Fatalf("too few followers: ceiling %d", c)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range []Frame{Hello{Epoch: 3, Incarnation: 17, Durability: 1, Partition: 2, Head: 40, Queue: "q", Owner: "n1"},
		Hello{Epoch: 3, Queue: "q", Owner: "n1", History: History{{0, 0, 0}, {7, 40, 2}, {9, 60, 3}}, End: 77},
		Position{Written: 9, Durable: 4}, Batch{First: 7, CatchUp: true, Records: []Record{{1, []byte("x")}, {2, nil}}},
		Batch{First: 8, Records: []Record{{3, []byte("y")}}}, Refuse{Reason: "no"}, Pull{From: 11, Max: 1 << 20}, Head{Offset: 12}} {
		f.Add(appendFrame(nil, fr))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := readFrame(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		again := appendFrame(nil, fr)
		fr2, err := readFrame(bufio.NewReader(bytes.NewReader(again)))
		if err != nil {
			t.Fatalf("re-encoded %T does not decode: %v", fr, err)
		}
		if fmt.Sprint(fr) != fmt.Sprint(fr2) {
			t.Fatalf("round trip changed the frame: %v → %v", fr, fr2)
		}
	})
}

// BenchmarkGateWait is the gate's cost on the applier's path, once per
// completed append, with the followers already past it.
func BenchmarkGateWait(b *testing.B) {
	g := NewGate(Durable, 3, []string{"a", "b"})
	g.Update("a", Position{Written: 100, Durable: 100})
	g.Update("b", Position{Written: 100, Durable: 90})
	stop := make(chan struct{})
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Wait(stop, 90); err != nil {
			b.Fatal(err)
		}
	}
}

// A peer that announces the largest frame and sends five bytes of it
// costs about what it sent, not the announcement.
func TestAnnouncedFrameCostsNothing(t *testing.T) {
	b := binary.LittleEndian.AppendUint32(nil, MaxFrame)
	b = append(b, typeBatch, 1, 2, 3, 4)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 20 {
		if _, err := readFrame(bufio.NewReader(bytes.NewReader(b))); err == nil {
			t.Fatal("a truncated frame decoded")
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("20 announcements of %d-byte frames allocated %d bytes", MaxFrame, grew)
	}
}

// BenchmarkReadFrame reads a batch of one 1 KiB record, the frame a
// follower reads for each record of a queue at a few messages a second.
func BenchmarkReadFrame(b *testing.B) {
	frame := appendFrame(nil, Batch{First: 7, Records: []Record{{1, bytes.Repeat([]byte("x"), 1024)}}})
	r := bytes.NewReader(frame)
	br := bufio.NewReaderSize(r, 4096)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(frame)
		br.Reset(r)
		if _, err := readFrame(br); err != nil {
			b.Fatal(err)
		}
	}
}

// A frame reads back whole on both sides of smallFrame, where the read
// switches from one allocation to a growing buffer, and a frame cut
// short is an error on both.
func TestFramesAroundTheSmallFrameBound(t *testing.T) {
	for _, size := range []int{smallFrame - 64, smallFrame + 64, 4 * smallFrame} {
		payload := bytes.Repeat([]byte{0xa5}, size)
		frame := appendFrame(nil, Batch{First: 9, Records: []Record{{2, payload}}})
		fr, err := readFrame(bufio.NewReader(bytes.NewReader(frame)))
		if err != nil {
			t.Fatalf("%d-byte record: %v", size, err)
		}
		bt, ok := fr.(Batch)
		if !ok || bt.First != 9 || len(bt.Records) != 1 || bt.Records[0].Type != 2 || !bytes.Equal(bt.Records[0].Payload, payload) {
			t.Fatalf("%d-byte record read back as %T %+v", size, fr, fr)
		}
		if _, err := readFrame(bufio.NewReader(bytes.NewReader(frame[:len(frame)-1]))); err == nil {
			t.Fatalf("%d-byte record: a frame one byte short was read", size)
		}
	}
}
