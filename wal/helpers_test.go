package wal

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// testCtx returns a context with a generous deadline for event-driven waits.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// payload returns a deterministic payload for offset-independent checks.
func payload(i int, size int) []byte {
	p := []byte(fmt.Sprintf("rec-%08d-", i))
	for len(p) < size {
		p = append(p, byte('a'+i%26))
	}
	return p[:max(size, 13)]
}

func entries(from, n, size int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Type: 1, Payload: payload(from+i, size)}
	}
	return es
}

func mustOpen(t testing.TB, fs vfs.FS, dir string, opts Options) *Log {
	t.Helper()
	opts.FS = fs
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// readAll reads every record from the head to the frontier read picks.
func readAll(t testing.TB, l *Log, durable bool) []Record {
	t.Helper()
	var out []Record
	from := l.Head()
	for {
		var recs []Record
		var err error
		if durable {
			recs, err = l.ReadDurable(from, 1<<20)
		} else {
			recs, err = l.ReadWritten(from, 1<<20)
		}
		if err != nil {
			t.Fatalf("read at %d: %v", from, err)
		}
		if len(recs) == 0 {
			return out
		}
		for _, r := range recs {
			out = append(out, Record{Offset: r.Offset, Type: r.Type, Payload: bytes.Clone(r.Payload)})
		}
		from = recs[len(recs)-1].Offset + 1
	}
}
