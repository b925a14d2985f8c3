package bridge

import (
	"net"
	"sync"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// fakeCloser is a Fibril server that answers the first connection's first
// Publish with a Corr-0 unavailable Error and closes (as a cluster node's
// breakOrder does), and confirms every publish on later connections.
func fakeCloser(t *testing.T) (string, func() int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns, confirmed := 0, 0
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns++
			first := conns == 1
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := wire.NewReader(c, wire.Options{})
				w := wire.NewWriter(c, wire.Options{})
				for {
					f, err := r.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *wire.Hello:
						v := min(f.Version, wire.Version)
						w.WriteFrame(&wire.HelloOK{Version: v, ServerName: "fake", SessionID: 1, MaxFrame: wire.DefaultMaxFrame})
						w.Flush()
						r.SetVersion(v)
						w.SetVersion(v)
					case *wire.Publish:
						if first {
							w.WriteFrame(&wire.Error{Code: wire.CodeUnavailable, Message: "resend on a new connection"})
							w.Flush()
							return
						}
						mu.Lock()
						confirmed++
						mu.Unlock()
						w.WriteFrame(&wire.Confirm{Corr: f.Corr, Durability: wire.DurabilityBuffered})
						w.Flush()
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return confirmed }
}

// A core message whose Fibril connection is lost, here closed by the
// broker with an unavailable Error (as a cluster node does after a
// forwarded publish failed), is published again on the next connection,
// not dropped.
func TestCoreIngestRetriesWhenTheBrokerClosesTheConnection(t *testing.T) {
	ns := startNATS(t)
	addr, confirmed := fakeCloser(t)
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr, Ingest: []Ingest{{Subject: "c.x", Queue: "q"}}})
	nc, _ := connectNATS(t, ns)
	if err := nc.Publish("c.x", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message confirmed or dropped", func() bool { return confirmed() > 0 || len(br.Stats().Dropped) > 0 })
	if s := br.Stats(); confirmed() != 1 || len(s.Dropped) != 0 {
		t.Fatalf("confirmed %d, dropped %v (last error %q): want it published again on the next connection", confirmed(), s.Dropped, s.LastError)
	}
}
