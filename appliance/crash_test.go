package appliance

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Crash safety on pebble's crashable in-memory FS. Publishers and consumers
// run against a durable and a buffered queue with checkpoints every few
// milliseconds; at a random point, or right after a snapshot reached the
// metadata store, the file system is cloned as a power loss would leave it
// (0, 50 or 100% of the unsynced data kept), and a broker reopened on the
// clone must hold:
//
//   - durable queue: every confirmed message not acked before the crash
//     (settles may be lost, so acked messages may come back, and are
//     counted);
//   - buffered queue: every confirmed message below the partition's
//     DurableNext read just before the crash (loss is limited to what came
//     after the last completed sync);
//   - both: nothing unknown, nothing twice, every message at the offset its
//     confirm named, and no snapshot that refers to records the log lost.

var (
	crashSeed  = flag.Int64("crash.seed", 0, "run TestCrashSafety once with this seed")
	crashIters = flag.Int("crash.iters", 8, "iterations of TestCrashSafety (2 with -short)")
)

func TestCrashSafety(t *testing.T) {
	if *crashSeed != 0 {
		runCrash(t, *crashSeed)
		return
	}
	iters := *crashIters
	if testing.Short() {
		iters = min(iters, 2)
	}
	base := time.Now().UnixNano()
	for i := range iters {
		seed := base + int64(i)
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runCrash(t, seed) })
	}
}

// crashPublished is what a publisher was told about one message.
type crashPublished struct {
	queue       string
	partition   int
	offset      uint64
	beforeClone bool // confirmed before the clone was taken
}

func runCrash(t *testing.T, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	afterSnapshot := rng.IntN(2) == 0 // crash right after a snapshot is stored, or at a random confirm
	crashAfter := 1 + rng.IntN(400)   // confirms before a random-point crash
	snapshotsBefore := 1 + rng.IntN(6)
	unsynced := []int{0, 50, 100}[rng.IntN(3)]
	syncMs := []int{0, 1, 5, 20}[rng.IntN(4)]
	if afterSnapshot && rng.IntN(2) == 0 {
		// The case that catches a snapshot stored before its log sync:
		// every unsynced byte lost, and no background sync to hide it.
		unsynced, syncMs = 0, 0
	}
	publishers := 2 + rng.IntN(3)
	t.Logf("seed %d: unsynced kept %d%%, crash %s, background sync %d ms, %d publishers (rerun with -crash.seed=%d)",
		seed, unsynced, map[bool]string{true: fmt.Sprintf("after snapshot %d", snapshotsBefore),
			false: fmt.Sprintf("after %d confirms", crashAfter)}[afterSnapshot], syncMs, publishers, seed)

	ctx := testCtx(t)
	mem := vfs.NewCrashableMem()
	hook := &metaSyncHook{FS: mem}
	logger, logs := capturingLogger()
	opts := Options{Logger: logger, CheckpointDelay: 10 * time.Millisecond, SegmentSize: 16 << 10, TailCacheBytes: 64 << 10}
	b := openBroker(t, hook, "data", opts)
	s := DefaultSettings()
	s.BackgroundSyncIntervalMs = syncMs
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	queues := []string{"dur", "buf"}
	declare(t, ctx, b, QueueConfig{Name: "dur", Durability: Durable, Partitions: 2, AckDeadline: 20 * time.Millisecond})
	declare(t, ctx, b, QueueConfig{Name: "buf", Durability: Buffered, Partitions: 2, AckDeadline: 20 * time.Millisecond})

	var (
		mu          sync.Mutex // guards the fields below, and is held while the clone is taken
		published   = map[string]crashPublished{}
		ackedBefore = map[string]bool{} // acks issued before the clone
		confirms    int
		cloneTaken  bool
		reached     = make(chan struct{})
		stop        = make(chan struct{})
		wg          sync.WaitGroup
	)
	snapshotStored := make(chan chan struct{})
	if afterSnapshot {
		hook.arm(snapshotsBefore, func() {
			done := make(chan struct{})
			select {
			case snapshotStored <- done:
				<-done // the clone is taken while this sync's caller waits
			case <-stop:
			}
		})
	}

	for pi := range publishers {
		prng := rand.New(rand.NewPCG(uint64(seed), uint64(pi)+1))
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				q := queues[prng.IntN(2)]
				bodyText := fmt.Sprintf("%s/%d/%d/%s", q, pi, seq, strings.Repeat("x", prng.IntN(300)))
				c, err := b.Publish(ctx, q, Message{Body: []byte(bodyText)})
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				mu.Lock()
				published[bodyText] = crashPublished{queue: q, partition: c.Partition, offset: c.Offset, beforeClone: !cloneTaken}
				if confirms++; confirms == crashAfter && !afterSnapshot {
					close(reached)
				}
				mu.Unlock()
			}
		})
	}
	for qi, q := range queues {
		ch := make(chan Delivery, 64)
		sub, err := b.Subscribe(q, SubscribeOptions{Prefetch: 8, Deliver: func(d Delivery) {
			select {
			case ch <- d:
			case <-stop:
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		crng := rand.New(rand.NewPCG(uint64(seed), uint64(100+qi)))
		wg.Go(func() {
			for {
				var d Delivery
				select {
				case d = <-ch:
				case <-stop:
					return
				}
				switch r := crng.IntN(10); {
				case r < 8:
					// Marked before the ack can reach the log; a
					// stale tag (the lease expired) settles nothing.
					mu.Lock()
					if !cloneTaken {
						ackedBefore[string(d.Body)] = true
					}
					mu.Unlock()
					if err := sub.Ack(d.Tag); err != nil {
						mu.Lock()
						delete(ackedBefore, string(d.Body))
						mu.Unlock()
					}
				case r < 9:
					_ = sub.Nack(true, d.Tag)
				default: // held until the lease expires
				}
			}
		})
	}

	// The crash.
	var release chan struct{}
	select {
	case <-reached:
	case release = <-snapshotStored:
	case <-ctx.Done():
		t.Fatal("the crash point never came")
	}
	mu.Lock()
	cloneTaken = true
	durableBefore := map[string][]uint64{}
	for _, q := range queues {
		for _, p := range info(t, b, q).Partitions {
			durableBefore[q] = append(durableBefore[q], p.DurableNext)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rng})
	mu.Unlock()
	if release != nil {
		close(release)
	}
	close(stop)
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Errorf("close the crashed broker's original: %v", err)
	}
	if t.Failed() {
		return
	}

	// What survived.
	b = openBroker(t, crashed, "data", opts)
	defer b.Close()
	if errs := b.QueueErrors(); len(errs) != 0 {
		t.Fatalf("queues failed to open after the crash: %v", errs)
	}
	present := map[string]Delivery{}
	for _, q := range queues {
		declare(t, ctx, b, QueueConfig{Name: q, AckDeadline: time.Hour}) // no expiry while draining
		in := info(t, b, q)
		if in.Unavailable != "" {
			t.Fatalf("%s unavailable after the crash: %s", q, in.Unavailable)
		}
		sub, c := subscribe(t, b, q, int(in.Messages)+1)
		for range in.Messages {
			d := c.next(t, ctx)
			key := string(d.Body)
			pub, known := published[key]
			if !known && !strings.HasPrefix(key, q+"/") {
				t.Fatalf("%s delivered %q, which nobody published to it", q, key)
			}
			if known && (pub.queue != q || pub.partition != d.Partition || pub.offset != d.Offset) {
				t.Fatalf("%q at %s %d/%d, confirmed at %s %d/%d", key, q, d.Partition, d.Offset, pub.queue, pub.partition, pub.offset)
			}
			if _, dup := present[key]; dup {
				t.Fatalf("%q delivered twice after the crash", key)
			}
			present[key] = d
			if err := sub.Ack(d.Tag); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, ctx, q+" drained", func() bool { return info(t, b, q).Messages == 0 })
	}

	var ackLost, lostInWindow, checked int
	for key, pub := range published {
		if !pub.beforeClone {
			continue
		}
		_, ok := present[key]
		switch {
		case ackedBefore[key]:
			if ok {
				ackLost++
			}
		case ok:
			checked++
		case pub.queue == "dur":
			t.Errorf("confirmed durable message %q (partition %d offset %d) lost", key, pub.partition, pub.offset)
		case pub.offset < durableBefore["buf"][pub.partition]:
			t.Errorf("confirmed buffered message %q at %d/%d lost, below the durable frontier %d seen before the crash",
				key, pub.partition, pub.offset, durableBefore["buf"][pub.partition])
		default:
			lostInWindow++
		}
	}
	if text := logs.String(); strings.Contains(text, "snapshot refers to records the log no longer has") ||
		strings.Contains(text, "snapshot is older than the log head") {
		t.Errorf("recovery distrusted a snapshot:\n%s", text)
	}
	t.Logf("%d confirmed, %d unsettled confirmed messages found, %d acked ones back (settle lost), %d buffered lost after the last sync; durable frontiers before the crash %v",
		len(published), checked, ackLost, lostInWindow, durableBefore)
}

// metaSyncHook wraps a file system and calls fire once, after the n-th
// successful sync of a metadata-store WAL file since arm: the moment a
// snapshot became recovery authority, before the checkpoint goes on.
type metaSyncHook struct {
	vfs.FS
	armed atomic.Bool
	left  atomic.Int64
	fire  func()
}

func (h *metaSyncHook) arm(n int, fire func()) {
	h.fire = fire
	h.left.Store(int64(n))
	h.armed.Store(true)
}

func (h *metaSyncHook) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.Create(name, c)
	return h.wrap(name, f), err
}

func (h *metaSyncHook) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.ReuseForWrite(oldname, newname, c)
	return h.wrap(newname, f), err
}

func (h *metaSyncHook) wrap(name string, f vfs.File) vfs.File {
	if f == nil || !strings.HasSuffix(name, ".log") || !strings.Contains(name, "meta") {
		return f
	}
	return &hookedFile{File: f, h: h}
}

func (h *metaSyncHook) synced(err error) {
	if err == nil && h.armed.Load() && h.left.Add(-1) == 0 {
		h.fire()
	}
}

type hookedFile struct {
	vfs.File
	h *metaSyncHook
}

func (f *hookedFile) Sync() error {
	err := f.File.Sync()
	f.h.synced(err)
	return err
}

func (f *hookedFile) SyncData() error {
	err := f.File.SyncData()
	f.h.synced(err)
	return err
}

func (f *hookedFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	f.h.synced(err)
	return full, err
}
