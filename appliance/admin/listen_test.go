package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTPServerDefaults: the server carries every timeout and the header
// limit, and its write timeout leaves room for the longest fetch wait.
func TestHTTPServerDefaults(t *testing.T) {
	f := newFixture(t, Options{})
	hs := f.srv.HTTPServer()
	if hs.ReadHeaderTimeout != 10*time.Second || hs.ReadTimeout != time.Minute || hs.WriteTimeout != 2*time.Minute ||
		hs.IdleTimeout != time.Minute || hs.MaxHeaderBytes != 128<<10 {
		t.Fatalf("defaults: %+v", hs)
	}
	if hs.WriteTimeout <= maxGetWait {
		t.Fatalf("write timeout %v does not exceed the longest fetch wait %v", hs.WriteTimeout, maxGetWait)
	}
	if hs.Protocols == nil || hs.Protocols.HTTP2() || !hs.Protocols.HTTP1() {
		t.Fatalf("protocols %v, want HTTP/1.1 only", hs.Protocols)
	}
	for _, bad := range []Options{
		{WriteTimeout: maxGetWait}, {ReadTimeout: -1}, {IdleTimeout: -time.Second}, {MaxConnections: -1}, {MaxHeaderBytes: -1},
	} {
		if _, err := New(f.b, bad); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}

// TestConnectionLimit: with MaxConnections 1, a second connection is not
// served while the first is open; once the first has stayed silent past
// ReadHeaderTimeout the server closes it, and only then is the second
// request answered: never sooner than that timeout after the first
// connection was opened (without the limit it is answered at once).
func TestConnectionLimit(t *testing.T) {
	const silence = 300 * time.Millisecond
	f := newFixture(t, Options{MaxConnections: 1, ReadHeaderTimeout: silence})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := f.srv.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(f.srv.Listener(ln)) }()
	t.Cleanup(func() {
		_ = hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})

	start := time.Now()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	events := make(chan string, 2)
	go func() {
		_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := silent.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			events <- "silent connection closed by the server"
		} else {
			events <- "silent connection: " + err.Error()
		}
	}()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			events <- "second dial: " + err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			events <- "second request: " + err.Error()
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			events <- "second request: " + err.Error()
			return
		}
		resp.Body.Close()
		if took := time.Since(start); took < silence {
			events <- fmt.Sprintf("second request answered %v after the first connection opened, before it could time out", took)
			return
		}
		events <- "second request answered " + resp.Status
	}()
	got := map[string]bool{<-events: true, <-events: true}
	for _, want := range []string{"silent connection closed by the server", "second request answered 200 OK"} {
		if !got[want] {
			t.Fatalf("got %v, want %q", got, want)
		}
	}
}
