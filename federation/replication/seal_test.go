package replication

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/wal"
)

// A copy of a buffered queue acknowledges records written, not synced,
// and the owner's gate counts them; then a background sync fails and the
// copy latches, its written end falling back to its last sync. Its seal
// must still say what it acknowledged (Acked), or report itself cut: a
// live witness sealing only the durable end it fell back to would count
// for records it no longer holds.
func TestLatchedCopySealsWhatItAcknowledged(t *testing.T) {
	owner := openLog(t, vfs.NewMem(), "owner")
	var failSync atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if failSync.CompareAndSwap(true, false) { // once: the latch's cut marker is synced
				return errors.New("injected fsync failure")
			}
		}
		return nil
	}))
	f := NewFollower(FollowerOptions{Dir: "r", FS: fs, Logger: quiet, BackgroundSyncInterval: time.Millisecond})
	appendRecords(t, owner, 0, 10, wal.AfterFlush)
	gate := NewGate(Written, 2, []string{"f1"})
	s := StartSender(SenderOptions{Hello: Hello{Epoch: 1, Queue: "q", Durability: appliance.Buffered}, Follower: "f1",
		Addr: serveFollower(t, f), Dial: dialTCP, Log: owner, Gate: gate, Logger: quiet})
	defer s.Close()
	waitGate(t, gate, 10)
	l, ok := f.Log("q", 0)
	if !ok {
		t.Fatal("no copy")
	}
	// Synced as far as the owner's end when it started following: a
	// witness from here on.
	if _, err := l.WaitDurable(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.SetBackgroundSyncInterval(-1); err != nil {
		t.Fatal(err)
	}
	appendRecords(t, owner, 10, 40, wal.AfterFlush)
	waitGate(t, gate, 50)
	acked := gate.Positions()["f1"].Written
	if d := l.DurableNext(); d >= acked {
		t.Fatalf("the copy synced to %d before the fault: nothing it acknowledged is unsynced", d)
	}

	failSync.Store(true)
	if err := f.SetBackgroundSyncInterval(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Latched():
	case <-time.After(time.Minute):
		t.Fatal("the copy's failing background sync never latched it")
	}
	s.Close()

	res, err := f.Seal(t.Context(), CopyID{Queue: "q"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Witness || res.End < 10 || res.End >= acked {
		t.Fatalf("the latched copy sealed %+v: want a witness cut back to its last sync, from 10 to below %d", res, acked)
	}
	if !res.Cut && res.Acked < acked {
		t.Fatalf("the latched copy sealed %+v: live, with Acked below the written end %d the owner's gate counted", res, acked)
	}
}
