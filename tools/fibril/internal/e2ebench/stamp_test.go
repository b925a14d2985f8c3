package e2ebench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

type fakeAnswer struct {
	done chan struct{}
	err  error
}

func (a fakeAnswer) Done() <-chan struct{}           { return a.done }
func (a fakeAnswer) Result() (client.Confirm, error) { return client.Confirm{}, a.err }

// A stamped publish carries the time its answer came, read once by the
// watcher when the answer comes, however late the bench waits for it.
func TestStampTakesTheTimeTheAnswerCame(t *testing.T) {
	came := time.Unix(100, 0)
	reads := 0
	clock := func() time.Time { reads++; return came.Add(time.Duration(reads-1) * time.Second) }
	a := fakeAnswer{done: make(chan struct{}), err: errRefused}
	p := stamp(a, clock)
	var _ unorderedPending = p
	close(a.done)
	arrived, err := p.Wait(context.Background())
	if !arrived.Equal(came) || !errors.Is(err, errRefused) || reads != 1 {
		t.Fatalf("Wait = %v, %v after %d clock reads; want %v, the answer's error, and one read", arrived, err, reads, came)
	}
	if again, _ := p.Wait(context.Background()); !again.Equal(came) {
		t.Fatalf("a second Wait says %v, want %v", again, came)
	}
}

func TestStampedWaitEndsWithItsContext(t *testing.T) {
	a := fakeAnswer{done: make(chan struct{})}
	defer close(a.done) // ends the watcher
	p := stamp(a, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
}
