package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/wiretest"
)

// A second fibrild on a data directory that one is serving fails at
// once, naming the pid that holds the directory; and a start whose admin
// port is taken fails before it opens any queue.
func TestStartRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	p := startDaemon(t, bin, "--storage.data_dir", data, "--storage.min_free", "0")
	c := wiretest.Dial(t, p.addr, "")
	c.Request(t, &wire.Declare{Corr: 1, Queue: "kept", Durability: wire.DurabilityDurable})
	c.Request(t, &wire.Publish{Corr: 2, Queue: "kept", Body: []byte("m")})

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: data, StartTimeout: waitLimit})
	want := fmt.Sprintf("already running: pid %d holds %s", p.Pid(), filepath.Join(data, "fibrild.pid"))
	if !errors.Is(err, fibrildproc.ErrExited) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second start on the same data directory: %v\nwant an exit saying %q", err, want)
	}
	c.NC.Close()
	p.stop(t)

	// The admin port is taken: the start fails before the broker opens.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: data, StartTimeout: waitLimit,
		Args: []string{"--admin.listen", taken.Addr().String()}})
	if !errors.Is(err, fibrildproc.ErrExited) || !strings.Contains(err.Error(), "admin.listen") {
		t.Fatalf("start with the admin port taken: %v", err)
	}
	if strings.Contains(err.Error(), "broker open") || strings.Contains(err.Error(), `queue=kept`) {
		t.Fatalf("the broker opened its queues before it found the admin port taken:\n%v", err)
	}
	// And once the port is free the directory serves again, its queue kept.
	taken.Close()
	p = startDaemon(t, bin, "--storage.data_dir", data, "--storage.min_free", "0")
	c = wiretest.Dial(t, p.addr, "")
	if _, ok := c.Request(t, &wire.Publish{Corr: 1, Queue: "kept", Body: []byte("again")}).(*wire.Confirm); !ok {
		t.Fatal("the queue is not served after the refused starts")
	}
	c.NC.Close()
	p.stop(t)
}
