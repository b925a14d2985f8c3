package bridge

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/fibril-edge/fibril/appliance/client"
)

// pausableProxy forwards TCP connections to a broker; while paused it
// holds what the clients send (the broker's answers still flow), so that
// a publish waits for its confirm as long as the test likes.
type pausableProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	gate  chan struct{} // closed while forwarding
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *pausableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausableProxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *pausableProxy) addr() string { return p.ln.Addr().String() }

func (p *pausableProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			_, _ = io.Copy(c, up)
		}()
		go func() {
			defer p.wg.Done()
			defer up.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.wait()
					if _, werr := up.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// wait blocks while the proxy is paused.
func (p *pausableProxy) wait() {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	<-gate
}

func (p *pausableProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *pausableProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// sentTo is how many messages the NATS server has written to the
// connection named name.
func sentTo(t *testing.T, ns *natsserver.Server, name string) int64 {
	t.Helper()
	cz, err := ns.Connz(&natsserver.ConnzOptions{})
	if err != nil {
		t.Fatalf("connz: %v", err)
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			return c.OutMsgs
		}
	}
	return 0
}

// A clean stop of a core ingest drains its subscription: the messages NATS
// delivered to the bridge before the stop, which it had not published to
// Fibril yet (here all of them: the broker is held back), still reach the
// queue, in order, and none is counted as dropped.
func TestCoreIngestStopDrainsReceivedMessages(t *testing.T) {
	const n = 200
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("drained").Buffered())
	proxy := startProxy(t, addr)
	br := runBridge(t, Options{Name: "drain", URLs: []string{ns.ClientURL()}, FibrilAddr: proxy.addr(),
		DrainTimeout: testTimeout / 2,
		Ingest:       []Ingest{{Subject: "d.x", Queue: "drained"}}})

	heldBack(t, ns, br, proxy, "d.x", "fibril-bridge-drain", n)
	if s := br.Stats(); s.Published != 0 {
		t.Fatalf("published %d while the broker was held back", s.Published)
	}

	br.cancel()
	proxy.resume()
	done := make(chan struct{})
	go func() { br.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("the bridge did not stop; stats %+v", br.Stats())
	}
	s := br.Stats()
	if s.Received != n || s.Published != n || len(s.Dropped) != 0 {
		t.Fatalf("after the stop: received %d, published %d, dropped %v; want %d published, none dropped", s.Received, s.Published, s.Dropped, n)
	}
	got := drain(t, fc, "drained")
	if len(got) != n {
		t.Fatalf("queue holds %d messages, want %d", len(got), n)
	}
	for i, d := range got {
		if string(d.Body) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, d.Body)
		}
	}
}

// A drain that runs out of DrainTimeout (the broker never answers) gives
// up: the stop returns, and every message not published is counted as a
// "shutdown" drop, none lost silently.
func TestCoreIngestDrainGivesUpAfterDrainTimeout(t *testing.T) {
	const n = 50
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("stuck").Buffered())
	proxy := startProxy(t, addr)
	br := runBridge(t, Options{Name: "stuck", URLs: []string{ns.ClientURL()}, FibrilAddr: proxy.addr(),
		DrainTimeout: 100 * time.Millisecond,
		Ingest:       []Ingest{{Subject: "s.x", Queue: "stuck"}}})

	heldBack(t, ns, br, proxy, "s.x", "fibril-bridge-stuck", n)

	// The broker stays silent: the drain gives up by itself, counting
	// each message it could not publish. (The proxy is let go afterwards
	// only so that the Fibril client's own close does not wait.)
	br.cancel()
	waitFor(t, "the drain to give up", func() bool { return br.Stats().Dropped["shutdown"] >= n })
	proxy.resume()
	br.stop()
	if s := br.Stats(); s.Received != n || s.Published != 0 || s.Dropped["shutdown"] != n || len(s.Dropped) != 1 {
		t.Fatalf("after the stop: received %d, published %d, dropped %v; want all %d dropped as shutdown", s.Received, s.Published, s.Dropped, n)
	}
}

// A stop while NATS is unreachable still publishes what NATS delivered
// before, and returns once that is done: it does not wait for NATS to come
// back (DrainTimeout here is longer than the test).
func TestCoreIngestStopDrainsWhileNATSIsDown(t *testing.T) {
	const n = 100
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("offline").Buffered())
	proxy := startProxy(t, addr)
	br := runBridge(t, Options{Name: "offline", URLs: []string{ns.ClientURL()}, FibrilAddr: proxy.addr(),
		DrainTimeout: 10 * testTimeout,
		Ingest:       []Ingest{{Subject: "o.x", Queue: "offline"}}})

	heldBack(t, ns, br, proxy, "o.x", "fibril-bridge-offline", n)
	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "the bridge to see NATS gone", func() bool { return br.Stats().State == StateReconnecting })

	br.cancel()
	proxy.resume()
	done := make(chan struct{})
	go func() { br.stop(); close(done) }()
	// nats.go's own end of a drain waits up to 10 s for a round trip to
	// the server; the bridge must not.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the stop waits for NATS; stats %+v", br.Stats())
	}
	if s := br.Stats(); s.Received != n || s.Published != n || len(s.Dropped) != 0 {
		t.Fatalf("after the stop: received %d, published %d, dropped %v; want %d published, none dropped", s.Received, s.Published, s.Dropped, n)
	}
	if got := drain(t, fc, "offline"); len(got) != n {
		t.Fatalf("queue holds %d messages, want %d", len(got), n)
	}
}

// heldBack holds the broker back behind proxy, publishes n messages to
// subject on ns and waits until NATS has delivered them all to the
// bridge's connection (named conn) and the bridge has taken the first.
func heldBack(t *testing.T, ns *natsserver.Server, br *running, proxy *pausableProxy, subject, conn string, n int) {
	t.Helper()
	proxy.pause()
	nc, _ := connectNATS(t, ns)
	for i := 0; i < n; i++ {
		if err := nc.Publish(subject, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "NATS to deliver every message to the bridge", func() bool { return sentTo(t, ns, conn) >= int64(n) })
	waitFor(t, "the first message on its way to Fibril", func() bool { return br.Stats().Received > 0 })
}
