package appliance

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A corrupt record in a sealed segment never stops the broker: the damaged
// range is copied aside (one record here), its messages are reported lost,
// and the rest of the queue, the rest of that segment included, serves.
func TestCorruptSegmentIsQuarantined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash bool // crash (no checkpoint): replay meets the damage at open
	}{
		{"found by replay at open", true},
		{"found while delivering", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			const n = 300
			fs, opts := closedQueue(t, n, tc.crash)
			victim := damageSegment(t, fs, fs.PathJoin("data", "queues", "q", "0"), 1)

			b := openBroker(t, fs, "data", opts)
			defer b.Close()
			c := newCollector()
			sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: 64, Deliver: c.deliver})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var q Quarantined
			// Every record is a publish here, so the hole's size is the loss.
			for got := uint64(0); q.File == "" || got < n-(q.ToOffset-q.FromOffset); got++ {
				d := c.next(t, ctx)
				if q.File == "" {
					if qs := mustInfo(t, b, "q").Partitions[0].Quarantined; len(qs) == 1 {
						q = qs[0]
					}
				}
				if q.File != "" && d.Offset >= q.FromOffset && d.Offset < q.ToOffset {
					t.Fatalf("delivered offset %d from the quarantined range", d.Offset)
				}
				if want := "message-" + pad(int(d.Offset)); string(d.Body) != want {
					t.Fatalf("offset %d body %q", d.Offset, d.Body)
				}
				if err := sub.Ack(d.Tag); err != nil {
					t.Fatal(err)
				}
			}
			// Found live, the dropped messages are counted; found by replay,
			// they were never in memory and only the range tells.
			damaged := strings.HasPrefix(q.File, victim+".") && strings.HasSuffix(q.File, ".damaged")
			if !damaged || q.ToOffset-q.FromOffset != 1 || (q.LostMessages == 0) != tc.crash {
				t.Fatalf("quarantine report %+v", q)
			}
			if lost := mustInfo(t, b, "q").Partitions[0].LostRecords; lost != 1 {
				t.Fatalf("partition reports %d log records lost, want 1", lost)
			}
			if _, err := fs.Stat(q.File); err != nil {
				t.Fatalf("quarantined file must be kept: %v", err)
			}
			if _, err := b.Publish(ctx, "q", Message{Body: []byte("after")}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A damaged record in the active segment costs that record at start-up:
// the messages after it are delivered, the hole is reported once and the
// record counted as lost.
func TestDamagedActiveRecordIsQuarantined(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "checkpointed", true: "replayed after a crash"}[crash], func(t *testing.T) {
			testDamagedActiveRecord(t, crash)
		})
	}
}

func testDamagedActiveRecord(t *testing.T, crash bool) {
	ctx := testCtx(t)
	const n = 300
	fs, opts := closedQueue(t, n, crash)
	damageSegment(t, fs, fs.PathJoin("data", "queues", "q", "0"), -1)

	b := openBroker(t, fs, "data", opts)
	defer b.Close()
	p := mustInfo(t, b, "q").Partitions[0]
	if len(p.Quarantined) != 1 || p.LostRecords != 1 || p.Quarantined[0].ToOffset-p.Quarantined[0].FromOffset != 1 {
		t.Fatalf("partition reports %+v lost %d, want one one-record hole", p.Quarantined, p.LostRecords)
	}
	hole := p.Quarantined[0]
	if hole.ToOffset >= n {
		t.Fatalf("hole %+v is at the end of the log: no record after it to keep", hole)
	}
	c := newCollector()
	sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: 64, Deliver: c.deliver})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := 0; i < n-1; i++ {
		d := c.next(t, ctx)
		if d.Offset == hole.FromOffset || string(d.Body) != "message-"+pad(int(d.Offset)) {
			t.Fatalf("delivered offset %d body %q (hole %+v)", d.Offset, d.Body, hole)
		}
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
	}
}

// closedQueue publishes n messages to queue q on 4 KiB segments and
// closes the broker; with crash, it returns the file system as a power cut
// would have left it (everything confirmed was synced).
func closedQueue(t *testing.T, n int, crash bool) (vfs.FS, Options) {
	t.Helper()
	ctx := testCtx(t)
	mem := vfs.NewCrashableMem()
	opts := Options{SegmentSize: 4 << 10, TailCacheBytes: -1}
	b := openBroker(t, mem, "data", opts)
	if _, err := b.Declare(ctx, QueueConfig{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := b.Publish(ctx, "q", Message{Body: body(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var fs vfs.FS = mem
	if crash {
		fs = mem.CrashClone(vfs.CrashCloneCfg{})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return fs, opts
}

func mustInfo(t *testing.T, b *Broker, name string) QueueInfo {
	t.Helper()
	info, err := b.QueueInfo(name)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// damageSegment flips a byte in the first record of the log's segment i
// (counted from the end when negative) and returns that segment's path.
func damageSegment(t *testing.T, fs vfs.FS, dir string, i int) string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, name := range names {
		if strings.HasSuffix(name, ".seg") {
			segs = append(segs, name)
		}
	}
	slices.Sort(segs)
	if len(segs) < 4 {
		t.Fatalf("want several segments, have %v", segs)
	}
	if i < 0 {
		i += len(segs)
	}
	victim := fs.PathJoin(dir, segs[i])
	f, err := fs.OpenReadWrite(victim, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	one := []byte{0}
	if _, err := f.ReadAt(one, 60); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x5a
	if _, err := f.WriteAt(one, 60); err != nil {
		t.Fatal(err)
	}
	return victim
}

func pad(i int) string {
	s := strconv.Itoa(i)
	return strings.Repeat("0", 6-len(s)) + s
}
