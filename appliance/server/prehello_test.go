package server

import (
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// dialFrom opens a TCP connection to addr from the loopback address
// local (any of 127.0.0.0/8), sending nothing.
func dialFrom(t *testing.T, addr, local string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: waitLimit, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", local, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// waitClosed waits until the server closes nc (a read ends with EOF or a
// reset), for at most waitLimit.
func waitClosed(t *testing.T, nc net.Conn, what string) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(waitLimit))
	var b [1]byte
	if _, err := nc.Read(b[:]); err == nil {
		t.Fatalf("%s: the server sent a byte before any Hello", what)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open after %v", what, waitLimit)
	}
}

// waiting lists the local addresses (host:port, as the client sees its
// own end) of the connections the server counts as waiting for their
// Hello.
func (s *testServer) waiting() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c := range s.conns {
		if s.preHello.Holds(c.pre) {
			out = append(out, c.raw.RemoteAddr().String())
		}
	}
	slices.Sort(out)
	return out
}

func addrs(ncs ...net.Conn) []string {
	var out []string
	for _, nc := range ncs {
		out = append(out, nc.LocalAddr().String())
	}
	slices.Sort(out)
	return out
}

// A source past MaxPreHelloPerSource loses its oldest waiting connection
// to its newest, and an authenticated client from the same source still
// gets in while the others hold their sockets.
func TestPreHelloPerSourceEvictsOldest(t *testing.T) {
	s := startServer(t, Options{Tokens: []string{"secret"}, MaxPreHello: 100, MaxPreHelloPerSource: 4, HelloTimeout: time.Minute})
	var held []net.Conn
	for range 4 {
		held = append(held, dialFrom(t, s.addr, "127.0.0.1"))
	}
	other := dialFrom(t, s.addr, "127.0.0.2")
	waitFor(t, "5 connections waiting", func() bool { return s.PreHello() == 5 })

	newest := dialFrom(t, s.addr, "127.0.0.1")
	waitClosed(t, held[0], "the oldest of 127.0.0.1's waiting connections")
	waitFor(t, "the newest to be counted", func() bool { return s.PreHello() == 5 })
	if got, want := s.waiting(), addrs(held[1], held[2], held[3], newest, other); !slices.Equal(got, want) {
		t.Fatalf("waiting %v, want %v", got, want)
	}
	if s.PreHelloEvicted() != 1 {
		t.Fatalf("evicted %d, want 1", s.PreHelloEvicted())
	}

	// The client's own connection took the next oldest one's place.
	c := connect(t, s.addr, "secret")
	c.declare(&wire.Declare{Queue: "q"})
	c.publish("q", []byte("in despite the flood"))
	waitClosed(t, held[1], "the next oldest of 127.0.0.1's waiting connections")
	if got, want := s.waiting(), addrs(held[2], held[3], newest, other); !slices.Equal(got, want) {
		t.Fatalf("waiting after the client authenticated: %v, want %v", got, want)
	}
}

// At MaxPreHello the oldest waiting connection of the source holding the
// most is closed, not one of a quieter source, and not the newcomer.
func TestPreHelloTotalEvictsBusiestSource(t *testing.T) {
	s := startServer(t, Options{MaxPreHello: 6, MaxPreHelloPerSource: 6, HelloTimeout: time.Minute, PressureHelloTimeout: time.Minute})
	var busy, quiet []net.Conn
	for range 4 {
		busy = append(busy, dialFrom(t, s.addr, "127.0.0.2"))
	}
	for range 2 {
		quiet = append(quiet, dialFrom(t, s.addr, "127.0.0.3"))
	}
	waitFor(t, "6 connections waiting", func() bool { return s.PreHello() == 6 })
	newcomer := dialFrom(t, s.addr, "127.0.0.4")
	waitClosed(t, busy[0], "the oldest connection of the busiest source")
	waitFor(t, "the newcomer to be counted", func() bool { return s.PreHello() == 6 })
	if got, want := s.waiting(), addrs(busy[1], busy[2], busy[3], quiet[0], quiet[1], newcomer); !slices.Equal(got, want) {
		t.Fatalf("waiting %v, want %v", got, want)
	}
}

// Past half of MaxPreHello the Hello timeout shortens to
// PressureHelloTimeout, for the connections already waiting too: with a
// one-minute HelloTimeout, every silent connection is closed within the
// test's wait, and counted.
func TestPressureShortensHelloTimeout(t *testing.T) {
	s := startServer(t, Options{MaxPreHello: 8, HelloTimeout: time.Minute, PressureHelloTimeout: 100 * time.Millisecond})
	var ncs []net.Conn
	for range 3 {
		ncs = append(ncs, dialFrom(t, s.addr, "127.0.0.1"))
	}
	waitFor(t, "3 connections waiting", func() bool { return s.PreHello() == 3 })
	for range 2 { // 5 of 8: past half
		ncs = append(ncs, dialFrom(t, s.addr, "127.0.0.1"))
	}
	start := time.Now()
	for i, nc := range ncs {
		waitClosed(t, nc, "a silent connection under pressure")
		if i == 0 && time.Since(start) > waitLimit/2 {
			t.Fatalf("the first connection, accepted before the pressure, took %v to close", time.Since(start))
		}
	}
	waitFor(t, "the timeouts to be counted", func() bool { return s.HelloTimeouts() == 5 && s.PreHello() == 0 })
	if s.PreHelloEvicted() != 0 {
		t.Fatalf("evicted %d; the limit was never reached", s.PreHelloEvicted())
	}
	// Once the flood has drained, a connection gets the full timeout again
	// and completes its Hello at leisure.
	c := dial(t, s.addr)
	waitFor(t, "the connection to be counted", func() bool { return s.PreHello() == 1 })
	if s.preHello.Pressure() {
		t.Fatal("still under pressure with one connection waiting")
	}
	c.send(&wire.Hello{Version: wire.Version, ClientName: t.Name()})
	if _, ok := c.read().(*wire.HelloOK); !ok {
		t.Fatal("no HelloOK")
	}
}

// A connection waiting for its Hello costs one goroutine and a small read
// buffer; the full buffer and the writer come with the Hello.
func TestPreHelloConnectionsAreCheap(t *testing.T) {
	s := startServer(t, Options{})
	const n = 50
	base := runtime.NumGoroutine()
	for range n {
		dialFrom(t, s.addr, "127.0.0.5")
	}
	waitFor(t, "the connections to wait for their Hello", func() bool { return s.PreHello() == n })
	if extra := runtime.NumGoroutine() - base; extra > n+n/4 {
		t.Fatalf("%d connections waiting for their Hello run %d more goroutines, want about one each", n, extra)
	}
	s.mu.Lock()
	for c := range s.conns {
		if size := c.r.BufferSize(); size != preHelloBuffer {
			t.Errorf("a connection waiting for its Hello has a %d-byte read buffer, want %d", size, preHelloBuffer)
		}
	}
	s.mu.Unlock()
	// After the Hello the buffer grows to the default, keeping what the
	// client pipelined behind it (wire's TestReaderSetBufferSize): a
	// publish larger than the small buffer goes through.
	c := connect(t, s.addr, "")
	c.declare(&wire.Declare{Queue: "q"})
	c.publish("q", make([]byte, 3*preHelloBuffer))
}

// A Hello longer than the longest token and client name allow is refused
// from its length alone, before the server reads or allocates its body.
func TestOversizedHelloRefusedFromItsLength(t *testing.T) {
	s := startServer(t, Options{})
	nc := dialFrom(t, s.addr, "127.0.0.1")
	// A length of 1 GiB, and not one byte of the body.
	if _, err := nc.Write([]byte{0x40, 0, 0, 0, byte(wire.TypeHello)}); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, nc: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
	c.expectFatal(wire.CodeTooLarge)
}
