package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/wal"
)

// End to end: the Go client against a real fibrild process on loopback.
// The fibrild binary comes from buildDaemon (main_test.go), built once per
// test binary and without -race even when the tests run with -race, so
// the broker runs at its real speed; the race detector still covers the
// client, which runs in this process.

const (
	e2eMessages   = 100000
	e2ePartitions = 4
	e2eKeys       = 64   // message keys, spread over the partitions
	e2eWindow     = 2000 // publishes in flight at a time
	e2ePrefetch   = 500
	e2eWait       = 3 * time.Minute // bound on each whole phase; a clean run takes seconds
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startE2E builds fibrild and starts it on data, listening on a free
// loopback port.
func startE2E(t *testing.T, data string) *daemonProcess {
	t.Helper()
	return startDaemon(t, buildDaemon(t), "--storage.data_dir", data,
		"--server.listen", "127.0.0.1:0", "--admin.listen", "127.0.0.1:0", "--storage.min_free", "0")
}

func dialE2E(t *testing.T, ctx context.Context, addr string, opts client.Options) *client.Client {
	t.Helper()
	opts.ClientName, opts.Logger, opts.MaxInFlight = "fibrild-e2e", quietLogger(), e2eWindow
	c, err := client.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// e2eMessage is message seq of a run: a unique ID, its sequence number as
// the body, and one of e2eKeys keys.
func e2eMessage(prefix string, seq int) client.Message {
	return client.Message{
		ID:   fmt.Sprintf("%s-%d", prefix, seq),
		Key:  fmt.Sprint("key-", seq%e2eKeys),
		Body: []byte(strconv.Itoa(seq)),
	}
}

const sentinelBody = "sentinel"

// recorder collects what a consumer is handed: how often each sequence
// number came, where, and the sentinels. It checks per-partition order as
// it goes and notes anything wrong in problems (handlers cannot fail the
// test). changed is signalled after every delivery.
type recorder struct {
	prefix  string
	changed chan struct{}

	mu        sync.Mutex
	counts    []int32  // deliveries per sequence number
	partition []int    // where each sequence number was delivered (last time)
	offset    []uint64 // at which offset
	distinct  int      // sequence numbers delivered at least once
	total     int      // deliveries of sequence numbers
	again     int      // deliveries with Deliveries > 1 (redeliveries)
	lastOff   map[int]uint64
	sentinels map[int]int // partition → sentinels delivered
	problems  []string
}

func newRecorder(prefix string, n int) *recorder {
	return &recorder{
		prefix: prefix, changed: make(chan struct{}, 1),
		counts: make([]int32, n), partition: make([]int, n), offset: make([]uint64, n),
		lastOff: make(map[int]uint64), sentinels: make(map[int]int),
	}
}

func (r *recorder) problem(format string, args ...any) {
	if len(r.problems) < 20 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// handle is a Subscribe handler: it records d and acks it (nil).
func (r *recorder) handle(_ context.Context, d *client.Delivery) error {
	r.mu.Lock()
	defer func() {
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}()
	if last, ok := r.lastOff[d.Partition]; ok && d.Offset <= last {
		r.problem("partition %d delivered offset %d after %d", d.Partition, d.Offset, last)
	}
	r.lastOff[d.Partition] = d.Offset
	if string(d.Body) == sentinelBody {
		r.sentinels[d.Partition]++
		return nil
	}
	seq, err := strconv.Atoi(string(d.Body))
	if err != nil || seq < 0 || seq >= len(r.counts) || d.ID != fmt.Sprintf("%s-%d", r.prefix, seq) {
		r.problem("unexpected delivery: id %q body %q", d.ID, d.Body)
		return nil
	}
	if r.counts[seq] == 0 {
		r.distinct++
	}
	r.counts[seq]++
	r.total++
	if d.Deliveries != 1 {
		r.again++
	}
	r.partition[seq], r.offset[seq] = d.Partition, d.Offset
	return nil
}

func (r *recorder) onError(err error) {
	r.mu.Lock()
	r.problem("consumer error: %v", err)
	r.mu.Unlock()
}

// waitFor waits until cond holds (checked under r.mu after each delivery)
// or ctx ends.
func (r *recorder) waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for {
		r.mu.Lock()
		ok := cond()
		distinct, total, problems := r.distinct, r.total, strings.Join(r.problems, "\n")
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (%d distinct messages in %d deliveries); problems:\n%s",
				what, ctx.Err(), distinct, total, problems)
		}
	}
}

// sentinelsDone reports whether every partition in want delivered its
// sentinel; call it with r.mu held.
func (r *recorder) sentinelsDone(want map[int]string) bool {
	for p := range want {
		if r.sentinels[p] == 0 {
			return false
		}
	}
	return true
}

func (r *recorder) checkNoProblems(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) > 0 {
		t.Fatalf("consumer saw:\n%s", strings.Join(r.problems, "\n"))
	}
}

// publishSentinels publishes one sentinel to each partition in keys
// (partition → a key that lands there). Since a partition delivers its
// lowest ready offset first, a consumer that has had every sentinel has
// had everything that was ready before them.
func publishSentinels(t *testing.T, ctx context.Context, c *client.Client, queue string, keys map[int]string) {
	t.Helper()
	for p, key := range keys {
		cf, err := c.Publish(ctx, queue, client.Message{ID: fmt.Sprint("sentinel-", p), Key: key, Body: []byte(sentinelBody)})
		if err != nil {
			t.Fatalf("publish sentinel to partition %d: %v", p, err)
		}
		if cf.Partition != p {
			t.Fatalf("sentinel with key %q went to partition %d, not %d", key, cf.Partition, p)
		}
	}
}

// TestEndToEnd is issue 3's test 5: a client against a real fibrild on
// loopback publishes 100,000 messages to a durable and to a buffered queue
// (4 partitions each) with PublishAsync, 2,000 in flight, while a consumer
// acks them. Every message arrives exactly once, at the partition and
// offset its confirm named; confirms and deliveries keep each partition's
// order; the queue is empty afterwards; SIGTERM stops fibrild with exit 0.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fibrild and publishes 200,000 messages")
	}
	start := time.Now()
	p := startE2E(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	c := dialE2E(t, ctx, p.addr, client.Options{})

	for _, mode := range []client.Durability{client.Durable, client.Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			phase := time.Now()
			endToEnd(t, ctx, c, mode)
			t.Logf("%s: %d messages published, consumed and acked in %v", mode, e2eMessages, time.Since(phase).Round(time.Millisecond))
		})
	}
	// Both queues' syncs went through the node's sync group: the durable
	// queue's publishes through the waited lane, the buffered queue's
	// background syncs through the background lane; none failed.
	m := scrape(t, p.Admin, "")
	if g, err := wal.NewSyncGroup(t.TempDir(), wal.SyncGroupOptions{}); err != nil {
		t.Log("no sync group here:", err)
	} else {
		_ = g.Close()
		for _, lane := range []string{"background", "waited"} {
			l := `{lane="` + lane + `"}`
			if shared := m["fibril_sync_group_covered_total"+l] + m["fibril_sync_group_alone_total"+l]; shared < 1 ||
				m["fibril_sync_group_failures_total"+l] != 0 {
				t.Errorf("sync group's %s lane: %v log syncs, %v failures; want the queue's syncs and no failure",
					lane, shared, m["fibril_sync_group_failures_total"+l])
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	t.Logf("total, build and start-up included: %v", time.Since(start).Round(time.Millisecond))
}

func endToEnd(t *testing.T, parent context.Context, c *client.Client, mode client.Durability) {
	ctx, cancel := context.WithTimeout(parent, e2eWait)
	defer cancel()
	queue := "e2e-" + mode.String()
	q := client.Queue(queue).Partitions(e2ePartitions)
	if mode == client.Buffered {
		q = q.Buffered()
	} else {
		q = q.Durable()
	}
	res, err := c.DeclareQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Durability != mode || res.Partitions != e2ePartitions {
		t.Fatalf("declare = %+v", res)
	}

	rec := newRecorder(queue, e2eMessages)
	cons, err := c.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: e2ePrefetch, Handler: rec.handle, OnError: rec.onError})
	if err != nil {
		t.Fatal(err)
	}

	// Publish with a ring of futures: the oldest is checked before its
	// slot is reused, so confirms are checked in publish order.
	var (
		ring      [e2eWindow]*client.Future
		confPart  = make([]int, e2eMessages)
		confOff   = make([]uint64, e2eMessages)
		keyPart   = make(map[int]int)    // key → partition
		lastConf  = make(map[int]uint64) // partition → last confirmed offset
		partCount = make(map[int]int)
	)
	check := func(seq int) {
		cf, err := ring[seq%e2eWindow].Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", seq, err)
		}
		if cf.Duplicate {
			t.Fatalf("publish %d confirmed as a duplicate", seq)
		}
		if cf.Partition < 0 || cf.Partition >= e2ePartitions {
			t.Fatalf("publish %d confirmed on partition %d", seq, cf.Partition)
		}
		k := seq % e2eKeys
		if p, ok := keyPart[k]; ok && p != cf.Partition {
			t.Fatalf("key %d went to partitions %d and %d", k, p, cf.Partition)
		}
		if last, ok := lastConf[cf.Partition]; ok && cf.Offset <= last {
			t.Fatalf("publish %d confirmed at offset %d of partition %d, not after %d", seq, cf.Offset, cf.Partition, last)
		}
		keyPart[k], lastConf[cf.Partition] = cf.Partition, cf.Offset
		confPart[seq], confOff[seq] = cf.Partition, cf.Offset
		partCount[cf.Partition]++
	}
	for seq := range e2eMessages {
		if seq >= e2eWindow {
			check(seq - e2eWindow)
		}
		ring[seq%e2eWindow] = c.PublishAsync(queue, e2eMessage(queue, seq))
	}
	for seq := max(0, e2eMessages-e2eWindow); seq < e2eMessages; seq++ {
		check(seq)
	}
	if len(partCount) != e2ePartitions {
		t.Fatalf("messages went to %d partitions, want %d: %v", len(partCount), e2ePartitions, partCount)
	}

	rec.waitFor(t, ctx, "every message", func() bool { return rec.distinct == e2eMessages })
	if err := cons.Close(); err != nil { // sends the last acks, then unsubscribes
		t.Fatal(err)
	}
	rec.checkNoProblems(t)
	if rec.total != e2eMessages || rec.again != 0 {
		t.Fatalf("%d deliveries of %d messages, %d of them redeliveries", rec.total, e2eMessages, rec.again)
	}
	for seq := range e2eMessages {
		if rec.partition[seq] != confPart[seq] || rec.offset[seq] != confOff[seq] {
			t.Fatalf("message %d delivered at %d/%d, confirmed at %d/%d",
				seq, rec.partition[seq], rec.offset[seq], confPart[seq], confOff[seq])
		}
	}

	// Nothing is left: a new consumer gets the sentinels and nothing else.
	keys := make(map[int]string)
	for k, p := range keyPart {
		keys[p] = fmt.Sprint("key-", k)
	}
	after := newRecorder(queue, e2eMessages)
	cons, err = c.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: e2ePrefetch, Handler: after.handle, OnError: after.onError})
	if err != nil {
		t.Fatal(err)
	}
	publishSentinels(t, ctx, c, queue, keys)
	after.waitFor(t, ctx, "the sentinels", func() bool { return after.sentinelsDone(keys) })
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	after.checkNoProblems(t)
	if after.total != 0 {
		t.Fatalf("after acking everything, %d messages were delivered again", after.total)
	}
}

// TestKillMidStream publishes to a durable queue and consumes it while
// fibrild is killed with SIGKILL, then restarts fibrild on the same data
// directory: every message confirmed before the kill is delivered after
// the restart unless it was acked before the kill. Acks not yet on disk
// at the kill bring their messages back (counted, not failed), as do
// messages stored whose confirm the kill cut off.
func TestKillMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills fibrild")
	}
	const (
		queue     = "e2e-crash"
		limit     = e2eMessages // publishing stops at the kill, long before this
		killAfter = 20000       // confirmed publishes
		ackedMin  = 5000        // and acked deliveries before the kill
	)
	start := time.Now()
	data := t.TempDir()
	p := startE2E(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	c := dialE2E(t, ctx, p.addr, client.Options{DisableReconnect: true})
	if _, err := c.DeclareQueue(ctx, client.Queue(queue).Durable().Partitions(e2ePartitions)); err != nil {
		t.Fatal(err)
	}
	before := newRecorder(queue, limit)
	if _, err := c.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: e2ePrefetch, Handler: before.handle,
		OnError: func(error) {}}); err != nil { // stale acks after the kill are expected
		t.Fatal(err)
	}

	// The publisher records which messages were confirmed, and where.
	var (
		killed    atomic.Bool
		confirmed = make([]bool, limit)
		keys      = make(map[int]string) // partition → a key that lands there
		pubErr    error                  // an error before the kill
		nConf     atomic.Int64
		published int
	)
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		var ring [e2eWindow]*client.Future
		failed := false
		check := func(seq int) {
			cf, err := ring[seq%e2eWindow].Result()
			switch {
			case err == nil:
				confirmed[seq] = true
				keys[cf.Partition] = fmt.Sprint("key-", seq%e2eKeys)
				nConf.Add(1)
				select {
				case before.changed <- struct{}{}:
				default:
				}
			case !killed.Load() && pubErr == nil:
				pubErr = fmt.Errorf("publish %d before the kill: %w", seq, err)
				failed = true
			default:
				failed = true
			}
		}
		for published = 0; published < limit && !failed; published++ {
			if published >= e2eWindow {
				check(published - e2eWindow)
			}
			ring[published%e2eWindow] = c.PublishAsync(queue, e2eMessage(queue, published))
		}
		for seq := max(0, published-e2eWindow); seq < published; seq++ {
			check(seq)
		}
	}()

	// Kill once enough is confirmed and acked; the publisher and the
	// consumer are both mid-stream then.
	before.waitFor(t, ctx, "progress before the kill", func() bool {
		return nConf.Load() >= killAfter && before.distinct >= ackedMin
	})
	killed.Store(true)
	p.kill(t)
	select {
	case <-pubDone:
	case <-ctx.Done():
		t.Fatal("the publisher did not finish after the kill")
	}
	c.Close() // ends the consumer; its last acks go nowhere
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	if published >= limit {
		t.Fatalf("all %d messages were published before the kill took effect", limit)
	}
	before.checkNoProblems(t)
	before.mu.Lock()
	ackedBefore := append([]int32(nil), before.counts...)
	before.mu.Unlock()
	if len(keys) != e2ePartitions {
		t.Fatalf("confirms named %d partitions, want %d", len(keys), e2ePartitions)
	}

	// Restart on the same data and consume everything up to a sentinel
	// per partition.
	p = startE2E(t, data)
	c = dialE2E(t, ctx, p.addr, client.Options{})
	after := newRecorder(queue, limit)
	cons, err := c.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: e2ePrefetch, Handler: after.handle, OnError: after.onError})
	if err != nil {
		t.Fatal(err)
	}
	publishSentinels(t, ctx, c, queue, keys)
	after.waitFor(t, ctx, "the sentinels after the restart", func() bool { return after.sentinelsDone(keys) })
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	after.checkNoProblems(t)

	var nConfirmed, lost, ackedBack, unconfirmedStored, twice int
	for seq := range limit {
		got := after.counts[seq]
		if got > 1 {
			twice++
		}
		switch {
		case confirmed[seq] && ackedBefore[seq] == 0 && got == 0:
			if lost < 10 {
				t.Errorf("message %d was confirmed, not acked, and is not delivered after the restart", seq)
			}
			lost++
		case ackedBefore[seq] > 0 && got > 0:
			ackedBack++
		case !confirmed[seq] && ackedBefore[seq] == 0 && got > 0:
			unconfirmedStored++
		}
		if confirmed[seq] {
			nConfirmed++
		}
		if seq >= published && got > 0 {
			t.Errorf("message %d was never published but is delivered", seq)
		}
	}
	if lost > 0 {
		t.Fatalf("%d confirmed messages lost", lost)
	}
	if twice > 0 {
		t.Errorf("%d messages delivered more than once after the restart", twice)
	}
	t.Logf("published %d, confirmed %d, acked before the kill %d; after the restart %d delivered: "+
		"%d acked before the kill came back, %d unconfirmed were stored",
		published, nConfirmed, before.distinct, after.total, ackedBack, unconfirmedStored)

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	t.Logf("total, build and start-up included: %v", time.Since(start).Round(time.Millisecond))
}

// kill sends SIGKILL and waits for the process to die of it.
func (p *daemonProcess) kill(t *testing.T) {
	t.Helper()
	p.Kill()
	err := p.ExitErr()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("fibrild ended with %v after SIGKILL\n%s", err, p.Log())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("fibrild ended with %v, not by SIGKILL\n%s", err, p.Log())
	}
}
