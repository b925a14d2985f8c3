package appliance

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fillLostMeta declares a queue, publishes five messages and acks the
// first two, closes the broker and removes its metadata store, as a lost
// or replaced meta directory would.
func fillLostMeta(t *testing.T, fs vfs.FS) QueueConfig {
	t.Helper()
	ctx := testCtx(t)
	b := openBroker(t, fs, "data", Options{})
	cfg := declare(t, ctx, b, QueueConfig{Name: "orders", Durability: Buffered, Partitions: 2, MaxMessages: 100}).Config
	for i := range 5 {
		publish(t, ctx, b, "orders", Message{Key: "k", Body: body(i)}) // one key: one partition, in order
	}
	sub, c := subscribe(t, b, "orders", 2)
	for range 2 {
		d := c.next(t, ctx)
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	sub.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll("data/meta"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A data directory whose metadata store is gone does not start empty: it
// refuses, naming the queues and the command that repairs it; after
// RecoverDeclarations the queue is back with its settings and its
// unacked messages.
func TestLostMetadataRefusesThenRecovers(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	cfg := fillLostMeta(t, fs)

	_, err := Open(Options{FS: fs, DataDir: "data", MinFreeBytes: -1})
	if !errors.Is(err, ErrOrphanLogs) || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "fibril recover") {
		t.Fatalf("open without metadata: %v; want ErrOrphanLogs naming orders and fibril recover", err)
	}

	got, err := RecoverDeclarations(Options{FS: fs, DataDir: "data"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "orders" || got[0].Inferred || got[0].Discarded || got[0].Config != cfg {
		t.Fatalf("recovered %+v; want orders as declared (%+v)", got, cfg)
	}
	b := openBroker(t, fs, "data", Options{})
	defer b.Close()
	in := info(t, b, "orders")
	if in.Config != cfg || in.Messages != 3 {
		t.Fatalf("after recovery: %+v with %d messages; want %+v with 3", in.Config, in.Messages, cfg)
	}
	_, c := subscribe(t, b, "orders", 10)
	for i := 2; i < 5; i++ {
		if d := c.next(t, ctx); string(d.Body) != string(body(i)) {
			t.Fatalf("delivered %q, want %q", d.Body, body(i))
		}
	}
}

// Without its QUEUE file (a directory from before the file existed) a
// queue is declared again from what its logs show: durable, with as many
// partitions as it has logs. With discard, the logs are removed instead.
func TestRecoverInfersOrDiscards(t *testing.T) {
	fs := vfs.NewMem()
	fillLostMeta(t, fs)
	if err := fs.Remove("data/queues/orders/QUEUE"); err != nil {
		t.Fatal(err)
	}
	got, err := RecoverDeclarations(Options{FS: fs, DataDir: "data"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Inferred || got[0].Config.Partitions != 2 || got[0].Config.Durability != Durable {
		t.Fatalf("inferred %+v; want orders, durable, 2 partitions", got)
	}
	b := openBroker(t, fs, "data", Options{})
	if in := info(t, b, "orders"); in.Messages != 3 {
		t.Fatalf("after an inferred recovery: %d messages, want 3", in.Messages)
	}
	if _, err := fs.Stat("data/queues/orders/QUEUE"); err != nil {
		t.Fatalf("the open did not write the recovered declaration beside the logs: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	fs = vfs.NewMem()
	fillLostMeta(t, fs)
	got, err = RecoverDeclarations(Options{FS: fs, DataDir: "data"}, true)
	if err != nil || len(got) != 1 || !got[0].Discarded {
		t.Fatalf("discard: %+v, %v", got, err)
	}
	b = openBroker(t, fs, "data", Options{})
	defer b.Close()
	if qs := b.QueueNames(); len(qs) != 0 {
		t.Fatalf("after discard the broker serves %v", qs)
	}
	if _, err := fs.Stat("data/queues/orders"); err == nil {
		t.Fatal("discard left the logs")
	}
}

// Logs without a declaration are never adopted by a new declare of the
// same name; a deletion a crash interrupted (DELETING marked, or the
// directory moved aside) is finished at the next open.
func TestOrphanLogsAndInterruptedDeletes(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{})
	if err := fs.MkdirAll("data/queues/ghost/0", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Declare(ctx, QueueConfig{Name: "ghost"}); !errors.Is(err, ErrOrphanLogs) {
		t.Fatalf("declare over logs without a declaration: %v; want ErrOrphanLogs", err)
	}
	if err := fs.RemoveAll("data/queues/ghost"); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "doomed"})
	publish(t, ctx, b, "doomed", Message{Body: []byte("x")})
	declare(t, ctx, b, QueueConfig{Name: "kept"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash right after the deletion was marked, and one after the logs
	// were moved aside.
	f, err := fs.Create("data/queues/doomed/DELETING", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fs.MkdirAll("data/queues/.deleted-old/0", 0o755); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{})
	defer b.Close()
	if qs := b.QueueNames(); len(qs) != 1 || qs[0] != "kept" {
		t.Fatalf("after the interrupted deletes the broker serves %v; want [kept]", qs)
	}
	for _, dir := range []string{"data/queues/doomed", "data/queues/.deleted-old"} {
		if _, err := fs.Stat(dir); err == nil {
			t.Fatalf("%s is still there", dir)
		}
	}
	declare(t, ctx, b, QueueConfig{Name: "doomed"})
	if in := info(t, b, "doomed"); in.Messages != 0 {
		t.Fatalf("a queue declared again after its deletion has %d messages", in.Messages)
	}
}
