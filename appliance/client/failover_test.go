package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// closedAddr returns a loopback address nothing listens on: a listener's
// port, closed again.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// declareOn declares queue on the broker at addr alone.
func declareOn(t *testing.T, ctx context.Context, addr, queue string) {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue(queue).Buffered()); err != nil {
		t.Fatal(err)
	}
}

// Dial with a list whose first address is dead connects to the next one;
// spaces around the entries do not matter.
func TestDialSkipsADeadAddress(t *testing.T) {
	_, addr := startBroker(t)
	dead := closedAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, dead+", "+addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("dial %s and %s: %v", dead, addr, err)
	}
	defer c.Close()
	if got := c.Addr(); got != addr {
		t.Errorf("connected to %q, want %q", got, addr)
	}
	if _, err := c.DeclareQueue(ctx, client.Queue("q")); err != nil {
		t.Errorf("declare on the second address: %v", err)
	}
	c.Close()
	if got := c.Addr(); got != "" {
		t.Errorf("Addr after Close = %q, want \"\"", got)
	}
}

// When no address of the list connects, the error names each address with
// its own error, and errors.Is sees through to them.
func TestDialErrorNamesEveryAddress(t *testing.T) {
	addrs := []string{closedAddr(t), closedAddr(t), closedAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Dial(ctx, strings.Join(addrs, ","), client.Options{Logger: quiet()})
	if err == nil {
		t.Fatal("dial of three dead addresses succeeded")
	}
	msg := err.Error()
	for _, a := range addrs {
		if !strings.Contains(msg, "dial "+a+": ") {
			t.Errorf("error %q does not name %s with its error", msg, a)
		}
	}
	if strings.Count(msg, "refused") != len(addrs) {
		t.Errorf("error %q: want one refusal per address", msg)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(%v, ECONNREFUSED) = false", err)
	}

	// One address: its error as it is.
	_, err = client.Dial(ctx, addrs[0], client.Options{Logger: quiet()})
	if err == nil || !strings.HasPrefix(err.Error(), "client: dial "+addrs[0]+": ") {
		t.Errorf("dial of one dead address: %v", err)
	}

	for _, bad := range []string{"", " ", addrs[0] + ",", addrs[0] + ",," + addrs[1]} {
		if _, err := client.Dial(ctx, bad, client.Options{Logger: quiet()}); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("Dial(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// A client connected to broker A whose server goes away reconnects to
// broker B, the next in its list: a publish then succeeds on B, and the
// consumer started on A is subscribed again on B and gets it.
func TestReconnectToTheNextBroker(t *testing.T) {
	_, addrA, shutdownA := startRestartable(t)
	bB, addrB := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	declareOn(t, ctx, addrA, "jobs")
	declareOn(t, ctx, addrB, "jobs")

	logs := newRecordLog()
	c, err := client.Dial(ctx, addrA+","+addrB, client.Options{Logger: slog.New(logs),
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Addr(); got != addrA {
		t.Fatalf("connected to %q, want the first address %q", got, addrA)
	}
	cons, err := c.Consume(ctx, "jobs", 10)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *client.Delivery {
		t.Helper()
		select {
		case d := <-cons.Messages():
			return d
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
		return nil
	}
	if _, err := c.Publish(ctx, "jobs", client.Message{Body: []byte("on A")}); err != nil {
		t.Fatal(err)
	}
	if d := next(); string(d.Body) != "on A" {
		t.Fatalf("got %q from A", d.Body)
	} else if err := d.Ack(); err != nil {
		t.Fatal(err)
	}

	shutdownA()
	got := untilReconnected(t, ctx, logs)
	if last := got[len(got)-1]; last.addr != addrB {
		t.Fatalf("reconnected to %s, want %s: %v", last.addr, addrB, got)
	}
	if a := c.Addr(); a != addrB {
		t.Errorf("Addr after the reconnect = %q, want %q", a, addrB)
	}
	cf, err := c.Publish(ctx, "jobs", client.Message{Body: []byte("on B")})
	if err != nil {
		t.Fatalf("publish after moving to B: %v", err)
	}
	if cf.Offset != 0 {
		t.Errorf("confirmed at offset %d, want 0 (B's first message)", cf.Offset)
	}
	if info, err := bB.QueueInfo("jobs"); err != nil || info.Counters.Published != 1 {
		t.Errorf("B's queue: %+v, %v; want 1 published", info.Counters, err)
	}
	if d := next(); string(d.Body) != "on B" {
		t.Errorf("after moving to B the consumer got %q, want %q", d.Body, "on B")
	}
}

// After a loss the client tries the addresses after the one it lost, in
// list order and round the end of the list, all in one round: the
// backoff is waited once per round, not once per dead address.
func TestReconnectGoesRoundTheList(t *testing.T) {
	bA, addrA, shutdownA := startRestartable(t)
	_, addrB, shutdownB := startRestartable(t)
	dead := []string{closedAddr(t), closedAddr(t), closedAddr(t), closedAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := newRecordLog()
	// With the backoff per dead address the first reconnect would wait
	// at least 0.25+0.5+1+2+4 s (each wait jittered into its upper half);
	// per round it waits at most 0.5 s.
	const initial = 500 * time.Millisecond
	list := append(append([]string{addrA}, dead...), addrB)
	c, err := client.Dial(ctx, strings.Join(list, ","), client.Options{Logger: slog.New(logs),
		InitialBackoff: initial, MaxBackoff: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	shutdownA()
	got := untilReconnected(t, ctx, logs)
	want := []logged{{msg: "fibril: connection lost; reconnecting", addr: addrA}}
	for i, d := range dead {
		want = append(want, logged{msg: "fibril: reconnect failed", addr: d, attempt: int64(i + 1)})
	}
	want = append(want, logged{msg: "fibril: reconnected", addr: addrB, attempt: int64(len(dead) + 1)})
	if !sameLogs(got, want) {
		t.Fatalf("after losing A the client logged\n%v\nwant\n%v", got, want)
	}
	if took := got[len(got)-1].at.Sub(got[0].at); took > 8*initial {
		t.Errorf("reconnecting past %d dead addresses took %v: a backoff per address, not per round", len(dead), took)
	}

	// From B, the last address, the next is A again: the first.
	ln, err := net.Listen("tcp", addrA)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addrA, err)
	}
	serve(t, bA, ln)
	shutdownB()
	got = untilReconnected(t, ctx, logs)
	want = []logged{{msg: "fibril: connection lost; reconnecting", addr: addrB}, {msg: "fibril: reconnected", addr: addrA, attempt: 1}}
	if !sameLogs(got, want) {
		t.Fatalf("after losing B the client logged\n%v\nwant\n%v", got, want)
	}
}

// logged is one of the client's log records about its connection.
type logged struct {
	msg, addr string
	attempt   int64 // attempt of a failed reconnect, attempts of a reconnect
	at        time.Time
}

func (l logged) String() string {
	return fmt.Sprintf("%q addr=%s attempt=%d", l.msg, l.addr, l.attempt)
}

// untilReconnected reads the client's log up to its next "reconnected"
// record and returns the records about the connection on the way.
func untilReconnected(t *testing.T, ctx context.Context, logs recordLog) []logged {
	t.Helper()
	var got []logged
	for {
		select {
		case r := <-logs.records:
			switch r.Message {
			case "fibril: connection lost; reconnecting", "fibril: reconnect failed", "fibril: reconnected":
			default:
				continue
			}
			l := logged{msg: r.Message, at: r.Time}
			r.Attrs(func(a slog.Attr) bool {
				switch a.Key {
				case "addr":
					l.addr = a.Value.String()
				case "attempt", "attempts":
					l.attempt = a.Value.Int64()
				}
				return true
			})
			got = append(got, l)
			if r.Message == "fibril: reconnected" {
				return got
			}
		case <-ctx.Done():
			t.Fatalf("the client logged no reconnect; so far %v", got)
		}
	}
}

// sameLogs compares messages, addresses and attempts, not times.
func sameLogs(got, want []logged) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].msg != want[i].msg || got[i].addr != want[i].addr || got[i].attempt != want[i].attempt {
			return false
		}
	}
	return true
}
