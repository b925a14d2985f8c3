package appliance

import (
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/internal/await"
)

// slowOpenFS holds every open of a file under match (a partition's log)
// until release closes: a queue whose recovery takes long.
type slowOpenFS struct {
	vfs.FS
	match   string
	release chan struct{}
}

func (f slowOpenFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if strings.Contains(name, f.match) {
		<-f.release
	}
	return f.FS.Open(name, opts...)
}

// A start that spends long on one queue says so while it does: which
// queue, and how many of how many are done; and once done, how long it
// took.
func TestOpenLogsItsProgress(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{})
	for _, name := range []string{"first", "slow", "third"} {
		declare(t, ctx, b, QueueConfig{Name: name, Durability: Durable})
		publish(t, ctx, b, name, Message{Body: []byte("m")})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	slow := slowOpenFS{FS: fs, match: "queues/slow/0/", release: make(chan struct{})}
	log, buf := capturingLogger()
	opened := make(chan *Broker, 1)
	go func() {
		b, err := Open(Options{FS: slow, DataDir: "data", Logger: log, MinFreeBytes: -1, ProgressInterval: 5 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		opened <- b
	}()
	await.Until(t, ctx, "a progress line naming the slow queue", func() bool {
		return strings.Contains(buf.String(), `msg="recovering queues" queue=slow`) && strings.Contains(buf.String(), " of=3 ")
	})
	close(slow.release)
	var b2 *Broker
	select {
	case b2 = <-opened:
	case <-ctx.Done():
		t.Fatal("Open did not return once the slow queue's files opened")
	}
	if b2 == nil {
		return
	}
	defer b2.Close()
	if !strings.Contains(buf.String(), `msg="queues recovered" queues=3`) {
		t.Fatalf("no closing line:\n%s", buf.String())
	}
	if got := len(b2.QueueNames()); got != 3 {
		t.Fatalf("%d queues open, want 3", got)
	}
}
