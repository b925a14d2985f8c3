package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// Helpers of the storage-failure, disk-full and cache-pressure cases
// (cases 5, 6 and 8): a gate, binaries, a sequential publisher with its
// outcome per message, and a read-back of a whole queue.

// requireAcceptanceGate skips t unless FIBRIL_ACCEPTANCE is set (make
// acceptance sets it).
func requireAcceptanceGate(t *testing.T) {
	t.Helper()
	if os.Getenv("FIBRIL_ACCEPTANCE") == "" {
		t.Skip("acceptance case: set FIBRIL_ACCEPTANCE=1 (make acceptance)")
	}
}

// buildFibrildTags builds tools/fibrild with the given build tags into a
// temporary directory of t.
func buildFibrildTags(t *testing.T, tags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fibrild")
	if err := fibrildproc.BuildWith(context.Background(), "../fibrild", bin, fibrildproc.BuildOptions{Tags: tags}); err != nil {
		t.Fatal(err)
	}
	return bin
}

// quietClient dials addr with logs discarded and reconnects off: a case
// that restarts the broker dials again.
func quietClient(t *testing.T, ctx context.Context, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{DisableReconnect: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// declare declares q or fails t.
func declare(t *testing.T, ctx context.Context, c *client.Client, q client.QueueConfig) {
	t.Helper()
	if _, err := c.DeclareQueue(ctx, q); err != nil {
		t.Fatalf("declare %s: %v", q.Name(), err)
	}
}

// outcomes is what happened to each message a case published.
type outcomes struct {
	confirmed []string         // in confirm order
	refused   map[string]error // the broker's error per message
}

// publishSeq publishes n messages id prefix-000000... one at a time, each
// body its id padded to size bytes, and stops at the first refusal when
// stopAtRefusal is set.
func publishSeq(ctx context.Context, c *client.Client, queue, prefix string, first, n, size int, stopAtRefusal bool, o *outcomes) {
	if o.refused == nil {
		o.refused = map[string]error{}
	}
	for i := first; i < first+n; i++ {
		id := idOf(prefix, i)
		if _, err := c.Publish(ctx, queue, client.Message{ID: id, Body: paddedBody(id, size)}); err != nil {
			o.refused[id] = err
			if stopAtRefusal {
				return
			}
			continue
		}
		o.confirmed = append(o.confirmed, id)
	}
}

// paddedBody is id followed by '.' up to size bytes (at least the id).
func paddedBody(id string, size int) []byte {
	b := []byte(id)
	if size > len(b) {
		b = append(b, bytes.Repeat([]byte{'.'}, size-len(b))...)
	}
	return b
}

// readBack consumes the whole queue, which holds want messages at rest,
// acking each, and returns the ids in delivery order per partition. It
// checks every body against its id and fails on a wait past ctx.
func readBack(t *testing.T, ctx context.Context, c *client.Client, queue string, want int64, size int) map[int][]string {
	t.Helper()
	got := map[int][]string{}
	if want == 0 {
		return got
	}
	cons, err := c.Consume(ctx, queue, 256)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	defer cons.Close()
	var n int64
	for n < want {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("consumer of %s ended after %d of %d: %v", queue, n, want, cons.Err())
			}
			if !bytes.Equal(d.Body, paddedBody(d.ID, size)) {
				t.Fatalf("queue %s partition %d offset %d: body of %q is not what was published (%d bytes)", queue, d.Partition, d.Offset, d.ID, len(d.Body))
			}
			got[d.Partition] = append(got[d.Partition], d.ID)
			n++
			if err := d.Ack(); err != nil {
				t.Fatalf("ack: %v", err)
			}
		case <-ctx.Done():
			t.Fatalf("read %d of %d messages from %s: %v", n, want, queue, ctx.Err())
		}
	}
	return got
}

// sameIDs compares the ids read (any partition) with want, naming the
// lost and the unexpected ones.
func sameIDs(read map[int][]string, want []string) (lost, unexpected []string, dups int) {
	seen := map[string]int{}
	for _, ids := range read {
		for _, id := range ids {
			seen[id]++
		}
	}
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
		if seen[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, k := range seen {
		if !wanted[id] {
			unexpected = append(unexpected, id)
		}
		dups += k - 1
	}
	slices.Sort(unexpected)
	return lost, unexpected, dups
}

// adminJSON does method path on the admin API with body (nil for none)
// and decodes the reply into out (nil to discard); it returns the status.
func adminJSON(ctx context.Context, admin, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, admin+path, rd)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, nil
}

// readyz is the admin API's /readyz: its status and body.
func readyz(ctx context.Context, admin string) (int, string, error) {
	var body json.RawMessage
	status, err := adminJSON(ctx, admin, http.MethodGet, "/readyz", nil, &body)
	return status, strings.TrimSpace(string(body)), err
}

// caseCtx is a context bounded well inside the go test timeout.
func caseCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
