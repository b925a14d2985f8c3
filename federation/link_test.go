package federation

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/await"
)

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// linkPair starts a mux whose replica handler is serve, and the links of a
// dialling side; both close with the test.
func linkPair(t *testing.T, serve func(net.Conn)) (*links, string, *countingListener, *mux) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	quiet := slog.New(slog.DiscardHandler)
	server := newMux(ln, ln.Addr(), nil, nil, func(string) string { return "" }, func(string) bool { return false },
		func(c net.Conn) { c.Close() }, serve, quiet)
	t.Cleanup(server.close)
	dialLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client := newMux(dialLn, dialLn.Addr(), nil, nil, func(string) string { return "" }, func(string) bool { return false },
		func(c net.Conn) { c.Close() }, nil, quiet)
	t.Cleanup(client.close)
	ls := newLinks(client)
	t.Cleanup(ls.close)
	return ls, ln.Addr().String(), ln, server
}

func echo(c net.Conn) {
	defer c.Close()
	io.Copy(c, c)
}

func openStream(t *testing.T, ls *links, addr string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ls.open(ctx, addr)
	if err != nil {
		t.Fatalf("open a stream to %s: %v", addr, err)
	}
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, sent %q", got, msg)
	}
	c.SetDeadline(time.Time{})
}

// Every stream opened to one node, concurrently or not, travels on one
// connection, and each carries its own bytes.
func TestLinkCarriesEveryStreamOnOneConnection(t *testing.T) {
	ls, addr, ln, _ := linkPair(t, echo)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			c := openStream(t, ls, addr)
			defer c.Close()
			roundTrip(t, c, bytes.Repeat([]byte{byte(i)}, 1000+i))
		})
	}
	wg.Wait()
	if n := ln.accepted.Load(); n != 1 {
		t.Fatalf("64 streams took %d connections, want 1", n)
	}
}

// A stream whose handler stops reading holds up only its own writer: the
// link's other streams go on.
func TestLinkStreamThatStopsReadingHoldsUpOnlyItself(t *testing.T) {
	stuck := make(chan struct{})
	// The stream that stops reading says so in its first byte: the
	// handlers of two streams may start in either order.
	ls, addr, _, _ := linkPair(t, func(c net.Conn) {
		defer c.Close()
		mark := make([]byte, 1)
		if _, err := io.ReadFull(c, mark); err != nil {
			return
		}
		if mark[0] == 'S' {
			<-stuck // reads nothing more
			return
		}
		if _, err := c.Write(mark); err != nil {
			return
		}
		io.Copy(c, c)
	})
	// Registered after linkPair's, so it runs first: closing the mux
	// waits for this handler.
	t.Cleanup(func() { close(stuck) })
	blocked := openStream(t, ls, addr)
	defer blocked.Close()
	wrote := make(chan error, 1)
	go func() {
		_, err := blocked.Write(append([]byte{'S'}, make([]byte, 4<<20)...)) // past the stream's window
		wrote <- err
	}()
	other := openStream(t, ls, addr)
	defer other.Close()
	for i := range 20 {
		roundTrip(t, other, bytes.Repeat([]byte{byte(i)}, 64<<10))
	}
	select {
	case err := <-wrote:
		t.Fatalf("4 MiB to a stream nobody reads went through (%v)", err)
	default:
	}
}

// Closing a stream ends a Read blocked on it at once, as closing a
// connection does; the other end sees the stream end.
func TestLinkStreamCloseEndsABlockedRead(t *testing.T) {
	ended := make(chan error, 1)
	ls, addr, _, _ := linkPair(t, func(c net.Conn) {
		defer c.Close()
		_, err := io.Copy(io.Discard, c)
		ended <- err
	})
	c := openStream(t, ls, addr)
	roundTripWrite(t, c)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	c.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("a Read on a closed stream returned data")
		}
	case <-time.After(time.Minute):
		t.Fatal("closing the stream did not end the Read blocked on it")
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the other end saw %v, want the stream's end", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the other end did not see the stream end")
	}
}

func roundTripWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
}

// A link that died (the peer went away) is dialled again by the next
// stream; its streams fail.
func TestLinkIsDialledAgainAfterItDies(t *testing.T) {
	ls, addr, ln, server := linkPair(t, echo)
	c := openStream(t, ls, addr)
	roundTrip(t, c, []byte("before"))
	server.rmu.Lock()
	for sess := range server.links {
		sess.Close() // the peer ends the link
	}
	server.rmu.Unlock()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a stream of a dead link read on: %v", err)
	}
	await.Within(t, time.Minute, "a stream on a new link", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c2, err := ls.open(ctx, addr)
		if err != nil {
			return false
		}
		defer c2.Close()
		c2.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c2.Write([]byte("after")); err != nil {
			return false
		}
		got := make([]byte, 5)
		_, err = io.ReadFull(c2, got)
		return err == nil && string(got) == "after"
	})
	if n := ln.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the first link and the one dialled after it died", n)
	}
}

// A ping travels on the link the streams use, dialling it once; a node
// that does not answer fails it at the caller's deadline; so does a node
// gone.
func TestLinkPing(t *testing.T) {
	ls, addr, ln, server := linkPair(t, echo)
	for range 5 {
		if err := ls.ping(ctxT(t), addr); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	if n := ln.accepted.Load(); n != 1 {
		t.Fatalf("5 pings took %d connections, want 1", n)
	}

	// A listener that accepts and never answers: the dial succeeds (a
	// link's first frame is the caller's), the ping does not.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	held.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	defer held.Wait()
	defer mute.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ls.ping(ctx, mute.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping of a node that does not answer: %v, want the deadline", err)
	}

	server.close()
	await.Within(t, 30*time.Second, "a ping to fail once the far end closed", func() bool {
		return ls.ping(ctxT(t), addr) != nil
	})
}

// A node's pings travel on a link of their own, not on the link its
// replication streams share, where they would queue behind data.
func TestNodePingsOnALinkOfItsOwn(t *testing.T) {
	c := startCluster(t, 2)
	n1, to := c.nodes["n1"], c.addrs["n2"]
	if err := n1.ping(ctxT(t), to); err != nil {
		t.Fatalf("ping: %v", err)
	}
	st, err := n1.DialReplica(ctxT(t), to)
	if err != nil {
		t.Fatalf("open a replication stream: %v", err)
	}
	defer st.Close()
	n1.links.mu.Lock()
	data := n1.links.byAddr[to]
	n1.links.mu.Unlock()
	n1.probes.mu.Lock()
	probe := n1.probes.byAddr[to]
	n1.probes.mu.Unlock()
	if data == nil || probe == nil || data == probe || data.sess == probe.sess {
		t.Fatalf("the replication link %p and the ping link %p are not two", data, probe)
	}
}
