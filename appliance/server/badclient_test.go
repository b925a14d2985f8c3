package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// TestBadClientsDoNotAffectGoodClient runs a good client publishing and
// consuming continuously while bad clients send random bytes, truncated
// frames, huge lengths, wrong tokens, frames they must not send, and
// trickle bytes (slowloris). Every bad connection must be closed by the
// server, and the good client's traffic must complete without error.
func TestBadClientsDoNotAffectGoodClient(t *testing.T) {
	ts := startServer(t, Options{Tokens: []string{"good"}, HelloTimeout: 300 * time.Millisecond,
		FrameTimeout: 300 * time.Millisecond})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	type badCase struct {
		name string
		run  func(addr string, rng *rand.Rand) error
	}
	cases := []badCase{
		{"random bytes", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, randomBytes(rng, 4096), 0)
		}},
		{"random bytes after hello", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, append(helloFrame("good"), randomBytes(rng, 4096)...), 0)
		}},
		{"truncated hello", func(addr string, rng *rand.Rand) error {
			h := helloFrame("good")
			return sendAndExpectClose(addr, h[:len(h)/2], 0)
		}},
		{"truncated publish", func(addr string, rng *rand.Rand) error {
			p := mustFrame(&wire.Publish{Corr: 1, Queue: "good", Body: randomBytes(rng, 300)})
			return sendAndExpectClose(addr, append(helloFrame("good"), p[:1+rng.IntN(len(p)-1)]...), 0)
		}},
		{"huge length", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, append(helloFrame("good"), 0xff, 0xff, 0xff, 0xff, byte(wire.TypePublish)), wire.CodeTooLarge)
		}},
		{"length zero", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, append(helloFrame("good"), 0, 0, 0, 0), wire.CodeBadRequest)
		}},
		{"unknown frame type", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, append(helloFrame("good"), 0, 0, 0, 1, 0xee), wire.CodeBadRequest)
		}},
		{"count beyond the body", func(addr string, rng *rand.Rand) error {
			// An Ack claiming four billion tags in a 13-byte body.
			ack := []byte{0, 0, 0, 14, byte(wire.TypeAck), 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}
			return sendAndExpectClose(addr, append(helloFrame("good"), ack...), wire.CodeBadRequest)
		}},
		{"server frame from a client", func(addr string, rng *rand.Rand) error {
			d := mustFrame(&wire.Deliver{SubID: 1, Tag: 1, Body: []byte("x")})
			return sendAndExpectClose(addr, append(helloFrame("good"), d...), wire.CodeBadRequest)
		}},
		{"wrong token", func(addr string, rng *rand.Rand) error {
			return sendAndExpectClose(addr, helloFrame("bad"), wire.CodeUnauthorized)
		}},
		{"slowloris hello", func(addr string, rng *rand.Rand) error {
			return trickleAndExpectClose(addr, nil, mustFrame(&wire.Hello{Version: 1, Token: string(randomBytes(rng, 1000))}))
		}},
		{"slowloris frame", func(addr string, rng *rand.Rand) error {
			return trickleAndExpectClose(addr, helloFrame("good"),
				mustFrame(&wire.Publish{Corr: 1, Queue: "good", Body: randomBytes(rng, 1000)}))
		}},
	}

	// Bad clients: each case three times, all at once.
	errs := make(chan error, 3*len(cases))
	badDone := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for rep := range 3 {
			for i, bc := range cases {
				rng := rand.New(rand.NewPCG(seed, uint64(rep*len(cases)+i)))
				wg.Go(func() {
					if err := bc.run(ts.addr, rng); err != nil {
						errs <- fmt.Errorf("%s (round %d): %w", bc.name, rep, err)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		close(badDone)
	}()

	// The good client, on the test goroutine, until the bad ones are done.
	c := connect(t, ts.addr, "good")
	c.declare(&wire.Declare{Queue: "good", Durability: wire.DurabilityBuffered})
	c.subscribe(1, "good", 64)
	next, sent := 0, 0
	for round := 0; ; round++ {
		if round >= 4 {
			select {
			case <-badDone:
			default:
				goto more
			}
			break
		}
	more:
		if round > 10_000 {
			t.Fatal("bad clients never finished")
		}
		const batch = 50
		corrs := make(map[uint64]bool, batch)
		for range batch {
			corr := c.nextCorr()
			corrs[corr] = true
			c.w.WriteFrame(&wire.Publish{Corr: corr, Queue: "good", Body: fmt.Appendf(nil, "g-%d", sent)})
			sent++
		}
		c.send()
		var tags []uint64
		for len(corrs) > 0 || next < sent {
			switch f := c.read().(type) {
			case *wire.Confirm:
				if !corrs[f.Corr] {
					t.Fatalf("unexpected confirm %+v", f)
				}
				delete(corrs, f.Corr)
			case *wire.Deliver:
				if want := fmt.Sprintf("g-%d", next); string(f.Body) != want || f.Deliveries != 1 {
					t.Fatalf("delivered %q (deliveries %d), want %q once", f.Body, f.Deliveries, want)
				}
				next++
				tags = append(tags, f.Tag)
				if len(tags) == 32 {
					c.send(&wire.Ack{SubID: 1, Tags: tags})
					tags = nil
				}
			default:
				t.Fatalf("good client got %#v", f)
			}
		}
		c.send(&wire.Ack{SubID: 1, Tags: tags})
	}
	for err := range errs {
		t.Error(err)
	}
	t.Logf("good client: %d messages published and consumed", sent)
	waitFor(t, "bad connections to be gone", func() bool { return ts.Connections() == 1 })
	waitFor(t, "every message to be settled", func() bool {
		info, _ := ts.b.QueueInfo("good")
		return info.Messages == 0
	})
}

func helloFrame(token string) []byte {
	return mustFrame(&wire.Hello{Version: wire.Version, Token: token, ClientName: "bad"})
}

func mustFrame(f wire.Frame) []byte {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		panic(err)
	}
	return b
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

// sendAndExpectClose sends data, shuts its write side, and reads until the
// server closes the connection. If code is not 0, the last frame must be
// Error{Corr 0, code}.
func sendAndExpectClose(addr string, data []byte, code wire.ErrorCode) error {
	nc, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.Write(data) // may fail: the server can close before it has read everything
	nc.(*net.TCPConn).CloseWrite()
	return expectServerClose(nc, code)
}

// trickleAndExpectClose sends head at once, then tail one byte every 20 ms,
// until the server closes the connection.
func trickleAndExpectClose(addr string, head, tail []byte) error {
	nc, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.Write(head); err != nil {
		return err
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for _, b := range tail {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
			if _, err := nc.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	err = expectServerClose(nc, 0)
	close(stop)
	<-trickled
	select {
	case <-trickled:
	default:
	}
	return err
}

// expectServerClose reads until the connection ends, and fails if that
// takes waitLimit.
func expectServerClose(nc net.Conn, code wire.ErrorCode) error {
	nc.SetReadDeadline(time.Now().Add(waitLimit))
	r := wire.NewReader(nc, wire.Options{})
	var last wire.Frame
	for {
		f, err := r.ReadFrame()
		if err == nil {
			last = f
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("server did not close the connection within %v", waitLimit)
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) &&
			!isReset(err) {
			return fmt.Errorf("reading from the server: %w", err)
		}
		break
	}
	if code == 0 {
		return nil
	}
	if e, ok := last.(*wire.Error); !ok || e.Corr != 0 || e.Code != code {
		return fmt.Errorf("last frame %#v, want Error{Corr 0, Code %s}", last, code)
	}
	return nil
}
