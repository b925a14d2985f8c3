package federation

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/internal/await"
)

// throughAnother starts three nodes, declares cfg through n1 and returns
// the queue's owner, a client connected to another node, and a context
// for the test's requests.
func throughAnother(t *testing.T, cfg appliance.QueueConfig) (*clusterNode, *client.Client, context.Context) {
	t.Helper()
	_, owner, cl, ctx := throughAnotherOf(t, cfg)
	return owner, cl, ctx
}

// throughAnotherOf is throughAnother that also returns the cluster.
func throughAnotherOf(t *testing.T, cfg appliance.QueueConfig) (testCluster, *clusterNode, *client.Client, context.Context) {
	t.Helper()
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	owner := nodes.declare(t, "n1", cfg, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return nodes, owner, nodes.other(owner).dial(t, ctx), ctx
}

// One connection publishing through a node that does not own the queue
// sees its confirms in its own publish order, as it would on the owner:
// with no fault, and while the owner restarts (publishes the restart cut
// off fail; those confirmed still come in order).
func TestForwardedPublishesKeepTheirOrder(t *testing.T) {
	nodes, owner, cl, ctx := throughAnotherOf(t, appliance.QueueConfig{Name: "ordered", Durability: appliance.Durable})
	epoch := nodes.assignments(t, "ordered")[0].Epoch

	publish := func(phase string, n int, during func()) (confirmed int) {
		futures := make([]*client.Future, n)
		for i := range n {
			futures[i] = cl.PublishAsyncContext(ctx, "ordered", client.Message{Body: []byte(fmt.Sprintf("%s-%d", phase, i))})
			if i == n/4 && during != nil {
				during()
			}
		}
		last, lastAt := int64(-1), -1
		for i, f := range futures {
			cf, err := f.Wait(ctx)
			if err != nil {
				if during == nil || !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrConnectionLost) {
					t.Fatalf("%s: publish %d: %v", phase, i, err)
				}
				continue
			}
			if int64(cf.Offset) <= last {
				t.Fatalf("%s: publish %d confirmed at offset %d, but publish %d, sent before it, at %d",
					phase, i, cf.Offset, lastAt, last)
			}
			last, lastAt = int64(cf.Offset), i
			confirmed++
		}
		return confirmed
	}
	if got := publish("steady", 400, nil); got != 400 {
		t.Fatalf("steady: %d of 400 confirmed", got)
	}
	restarted := make(chan struct{})
	got := publish("restart", 400, func() {
		go func() {
			defer close(restarted)
			owner.restart(t)
		}()
	})
	<-restarted
	nodes.servedAfter(t, "ordered", epoch) // the restarted owner asks for a recovery: served again after it
	after := publish("after", 50, nil)
	if after != 50 {
		t.Fatalf("after the owner's restart: %d of 50 confirmed", after)
	}
	t.Logf("across the owner's restart %d of 400 publishes confirmed, in order", got)
}

// A publisher that keeps its order across a lost connection (each publish
// pinned behind the one before, client.PublishAsyncAfter) publishes
// through a node that does not own the queue while the owner restarts.
// Once one of its publishes fails, none after it may be confirmed: the
// resend of the failed one would be stored behind it. The node ends the
// publishing connection, as the owner's loss would have, and a publisher
// starting afresh on a new connection is confirmed again.
func TestForwardedFailureIsNotOvertaken(t *testing.T) {
	nodes, owner, cl, ctx := throughAnotherOf(t, appliance.QueueConfig{Name: "chained", Durability: appliance.Durable})
	epoch := nodes.assignments(t, "chained")[0].Epoch
	const n = 400
	futures := make([]*client.Future, n)
	restarted := make(chan struct{})
	var prev *client.Future
	for i := range n {
		prev = cl.PublishAsyncAfter(ctx, prev, "chained", client.Message{Body: []byte(fmt.Sprint(i))})
		futures[i] = prev
		time.Sleep(2 * time.Millisecond) // paced, so that the restart falls among them
		if i == n/4 {
			go func() { defer close(restarted); owner.restart(t) }()
		}
	}
	firstFailed := -1
	for i, f := range futures {
		_, err := f.Wait(ctx)
		if err != nil {
			if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrConnectionLost) &&
				!errors.Is(err, client.ErrNotConnected) {
				t.Fatalf("publish %d: %v", i, err)
			}
			if firstFailed < 0 {
				firstFailed = i
			}
			continue
		}
		if firstFailed >= 0 {
			t.Fatalf("publish %d failed, then publish %d, pinned behind it, was confirmed: a resend of %d would land behind it",
				firstFailed, i, firstFailed)
		}
	}
	<-restarted
	nodes.servedAfter(t, "chained", epoch)
	for i := range 20 { // afresh, after the recovery the restarted owner asked for
		if _, err := cl.PublishAsyncContext(ctx, "chained", client.Message{Body: []byte(fmt.Sprint("after-", i))}).Wait(ctx); err != nil {
			t.Fatalf("a publish after the restart: %v", err)
		}
	}
	t.Logf("the chain broke at publish %d of %d", firstFailed, n)
}

// A publish's body is read in place from the connection's buffer, valid
// only while the publish is handled: a forwarded one must be stored on
// the owner as it was sent, with publishes pipelined across many refills
// of the buffer.
func TestForwardedBodiesAreStoredAsSent(t *testing.T) {
	owner, cl, ctx := throughAnother(t, appliance.QueueConfig{Name: "bodies", Durability: appliance.Buffered})
	const n = 1000
	bodyOf := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("<%05d>", i)), 100+i%150) }
	futures := make([]*client.Future, n)
	for i := range n {
		futures[i] = cl.PublishAsyncContext(ctx, "bodies", client.Message{Body: bodyOf(i)})
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	cons, err := owner.dial(t, ctx).Consume(ctx, "bodies", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range n {
		select {
		case d := <-cons.Messages():
			if !bytes.Equal(d.Body, bodyOf(i)) {
				t.Fatalf("message %d stored as %.40q..., sent as %.40q...", i, d.Body, bodyOf(i))
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages delivered", i, n)
		}
	}
}

// Local says a publish goes to this node's broker at once only on the
// queue's owner: elsewhere, and for a queue no node has, Forward decides
// (and may wait).
func TestLocalOnlyOnTheOwner(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "here", Durability: appliance.Buffered}, "")
	await.Within(t, 30*time.Second, "the owner to serve the queue locally", func() bool { return owner.cluster.Local("here") })
	if via := nodes.other(owner); via.cluster.Local("here") {
		t.Fatalf("%s, which does not own the queue, calls it local", via.id)
	}
	if owner.cluster.Local("nowhere") {
		t.Fatal("a queue no node has is local")
	}
}

// Over the cluster's TLS, a forwarding connection reaches only the node it
// means: a client listener presenting another node's certificate, signed
// by the same cluster CA, is refused in the handshake, before the token a
// forwarded publish carries goes out.
func TestForwardReachesOnlyTheNodeItNames(t *testing.T) {
	nodeTLS, _ := clusterCerts(t)
	n2srv, _ := nodeTLS("n2")
	_, n1cli := nodeTLS("n1")
	b, err := appliance.Open(appliance.Options{DataDir: t.TempDir(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv, err := server.New(b, server.Options{Tokens: []string{"s3cret"},
		TLS: &tls.Config{Certificates: n2srv.Certificates, MinVersion: tls.VersionTLS12}}) // as listenerTLS serves a node's certificate
	if err != nil {
		t.Fatal(err)
	}
	ln := listenLoopback(t)
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	fwd := n1cli.Clone() // as the daemon's forwardOptions builds it
	fwd.Certificates = nil
	c := &Cluster{forwardOpts: client.Options{Token: "s3cret", TLS: fwd}, fwdNamed: true,
		forward: map[string]*client.Client{}, stop: make(chan struct{})}
	defer c.closeForwarding()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := ln.Addr().String()
	if _, err := c.forwardClient(ctx, "n3", addr); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("forwarding to n3 at a listener with n2's certificate: %v, want ErrWrongPeer", err)
	}
	cl, err := c.forwardClient(ctx, "n2", addr)
	if err != nil {
		t.Fatalf("forwarding to n2 at its own listener: %v", err)
	}
	if _, err := cl.DeclareQueue(ctx, client.Queue("q")); err != nil {
		t.Fatalf("declare through the forwarding connection: %v", err)
	}
}
