package appliance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// modeConfirm is what a publisher was told about one message.
type modeConfirm struct {
	part int
	off  uint64
	mode Durability
}

// A mode change under load, in both directions, then a power cut that
// keeps no unsynced byte: each partition's log splits at one offset into
// confirms of the old mode and of the new, every confirm that said durable
// survives the cut, and a change to durable leaves nothing confirmed
// before it unsynced either (the fence synced it).
func TestModeChangeUnderLoadThenPowerCut(t *testing.T) {
	for _, tc := range []struct{ from, to Durability }{{Buffered, Durable}, {Durable, Buffered}} {
		t.Run(fmt.Sprintf("%s-to-%s", tc.from, tc.to), func(t *testing.T) {
			ctx := testCtx(t)
			mem := vfs.NewCrashableMem()
			opts := Options{Logger: quietLogger(), SegmentSize: 1 << 20}
			b := openBroker(t, mem, "data", opts)
			s := b.Settings()
			s.BackgroundSyncIntervalMs = 60_000 // no background sync hides what the fence must do
			if err := b.UpdateSettings(s); err != nil {
				t.Fatal(err)
			}
			declare(t, ctx, b, QueueConfig{Name: "q", Durability: tc.from, Partitions: 2})

			var (
				mu       sync.Mutex
				confirms = map[string]modeConfirm{}
				failed   atomic.Int64
				stop     atomic.Bool
				wg       sync.WaitGroup
				n        atomic.Int64
			)
			for w := range 4 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						id := fmt.Sprintf("w%d-%d", w, i)
						c, err := b.Publish(ctx, "q", Message{Body: []byte(id)})
						if err != nil {
							failed.Add(1)
							continue
						}
						mu.Lock()
						confirms[id] = modeConfirm{c.Partition, c.Offset, c.Durability}
						mu.Unlock()
						n.Add(1)
					}
				})
			}
			waitFor(t, ctx, "200 confirms before the change", func() bool { return n.Load() >= 200 })
			cfg, changed, err := b.SetMode(ctx, "q", tc.to)
			if err != nil || !changed || cfg.Durability != tc.to {
				t.Fatalf("SetMode: %v, changed %v, mode %s", err, changed, cfg.Durability)
			}
			at := n.Load()
			waitFor(t, ctx, "200 confirms after the change", func() bool { return n.Load() >= at+200 })
			stop.Store(true)
			wg.Wait()
			if failed.Load() != 0 {
				t.Fatalf("%d publishes failed", failed.Load())
			}
			in := info(t, b, "q")
			if in.Config.Durability != tc.to || in.ModeChange.Pending || in.ModeChange.LastError != "" || in.ModeChange.Changed.IsZero() {
				t.Fatalf("queue info after the change: mode %s, %+v", in.Config.Durability, in.ModeChange)
			}
			for _, p := range in.Partitions {
				if p.Mode != tc.to {
					t.Fatalf("partition %d applies %s", p.Index, p.Mode)
				}
			}

			// Each partition splits at one offset: the old mode below it,
			// the new one from it on.
			byMode := map[Durability]int{}
			split := map[int]uint64{}
			for _, c := range confirms {
				byMode[c.mode]++
				if c.mode == tc.to {
					if s, ok := split[c.part]; !ok || c.off < s {
						split[c.part] = c.off
					}
				}
			}
			if byMode[tc.from] == 0 || byMode[tc.to] == 0 {
				t.Fatalf("confirms by mode %v: want both", byMode)
			}
			for id, c := range confirms {
				if s, ok := split[c.part]; ok && (c.mode == tc.from) != (c.off < s) {
					t.Fatalf("%s confirmed %s at %d/%d, the first %s confirm of that partition at %d", id, c.mode, c.part, c.off, tc.to, s)
				}
			}

			// The power cut: no unsynced byte kept.
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 2))})
			b.Close()
			b2 := openBroker(t, crashed, "data", opts)
			defer b2.Close()
			after := info(t, b2, "q")
			if after.Config.Durability != tc.to {
				t.Fatalf("after the cut the queue is %s, want %s", after.Config.Durability, tc.to)
			}
			kept := map[string]bool{}
			sub, coll := subscribe(t, b2, "q", 64)
			for range after.Messages {
				d := coll.next(t, ctx)
				kept[string(d.Body)] = true
				if err := sub.Ack(d.Tag); err != nil {
					t.Fatal(err)
				}
			}
			var lostDurable, lostBuffered []string
			for id, c := range confirms {
				if kept[id] {
					continue
				}
				if c.mode == Durable {
					lostDurable = append(lostDurable, id)
				} else {
					lostBuffered = append(lostBuffered, id)
				}
			}
			if len(lostDurable) > 0 {
				t.Fatalf("%d confirms that said durable were lost to the cut, e.g. %s", len(lostDurable), lostDurable[0])
			}
			if tc.to == Durable && len(lostBuffered) > 0 {
				t.Fatalf("%d buffered confirms from before the change to durable were lost: the fence did not sync them", len(lostBuffered))
			}
			t.Logf("%d confirms %s, %d %s; %d buffered ones lost to the cut", byMode[tc.from], tc.from, byMode[tc.to], tc.to, len(lostBuffered))
		})
	}
}

// One change at a time: a second while the first waits is refused as
// pending; the same mode again changes nothing; a change whose sync fails
// leaves the queue in its mode and says why in its info; a declare naming
// the other mode still conflicts.
func TestModeChangeFencing(t *testing.T) {
	ctx := testCtx(t)
	fs, failSync := segmentSyncFailures(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Buffered})
	publish(t, ctx, b, "q", Message{Body: body(1)})

	if _, changed, err := b.SetMode(ctx, "q", Buffered); err != nil || changed {
		t.Fatalf("same mode: changed %v, %v", changed, err)
	}
	q, _ := b.queue("q")
	q.parts[0].submitMu.Lock() // an append in the way holds the fence
	first := make(chan error, 1)
	go func() {
		_, _, err := b.SetMode(ctx, "q", Durable)
		first <- err
	}()
	waitFor(t, ctx, "the change to be pending", func() bool { return info(t, b, "q").ModeChange.Pending })
	if _, _, err := b.SetMode(ctx, "q", Durable); !errors.Is(err, ErrModeChangePending) || !errors.Is(err, ErrConflict) {
		t.Fatalf("a second change while one is pending: %v", err)
	}
	q.parts[0].submitMu.Unlock()
	if err := <-first; err != nil {
		t.Fatalf("the first change: %v", err)
	}
	if _, err := b.Declare(ctx, QueueConfig{Name: "q", Durability: Buffered}); !errors.Is(err, ErrModeConflict) {
		t.Fatalf("a declare naming the old mode: %v", err)
	}

	// Back to buffered, then a change to durable whose sync fails.
	if _, _, err := b.SetMode(ctx, "q", Buffered); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, b, "q", Message{Body: body(2)})
	failSync.Store(true)
	_, changed, err := b.SetMode(ctx, "q", Durable)
	if err == nil || changed || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a change to durable with syncs failing: changed %v, %v", changed, err)
	}
	in := info(t, b, "q")
	if in.Config.Durability != Buffered || in.ModeChange.Pending || !strings.Contains(in.ModeChange.LastError, "sync") || in.ModeChange.FailedAt.IsZero() {
		t.Fatalf("after the failed change: mode %s, %+v", in.Config.Durability, in.ModeChange)
	}
	if _, _, err := b.SetMode(ctx, "nope", Durable); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	if _, _, err := b.SetMode(ctx, "q", Durability(9)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad mode: %v", err)
	}
}
