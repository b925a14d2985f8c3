package appliance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The user guide's behaviours (seed 003): the mode is fixed by the first
// declare, a declare naming no mode keeps it, the reply says which mode is in
// effect, buffered queues confirm and deliver before the sync, durable queues
// only after it.

func TestModeFixedAtFirstDeclare(t *testing.T) {
	for _, first := range []Durability{Durable, Buffered} {
		other := Buffered
		if first == Buffered {
			other = Durable
		}
		t.Run(first.String(), func(t *testing.T) {
			ctx := testCtx(t)
			fs := vfs.NewMem()
			b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
			r := declare(t, ctx, b, QueueConfig{Name: "clicks", Durability: first})
			checkReply := func(what string, r DeclareResult, created bool) {
				t.Helper()
				if r.Created != created || r.Config.Durability != first {
					t.Fatalf("%s: created %v durability %s, want %v %s", what, r.Created, r.Config.Durability, created, first)
				}
				if first == Buffered && r.Warning != BufferedWarning {
					t.Fatalf("%s: warning %q", what, r.Warning)
				}
				if first == Durable && r.Warning != "" {
					t.Fatalf("%s: a durable queue got the warning %q", what, r.Warning)
				}
			}
			checkReply("first declare", r, true)

			// Naming the other mode fails and changes nothing.
			if _, err := b.Declare(ctx, QueueConfig{Name: "clicks", Durability: other}); !errors.Is(err, ErrModeConflict) {
				t.Fatalf("declare as %s: %v, want ErrModeConflict", other, err)
			}
			// Naming no mode keeps it; naming the same mode confirms it.
			checkReply("declare without a mode", declare(t, ctx, b, QueueConfig{Name: "clicks"}), false)
			checkReply("declare with the same mode", declare(t, ctx, b, QueueConfig{Name: "clicks", Durability: first}), false)
			if in := info(t, b, "clicks"); in.Config.Durability != first || (first == Buffered) != (in.Warning != "") {
				t.Fatalf("queue info: %s, warning %q", in.Config.Durability, in.Warning)
			}

			// The declaration survives a restart, mode included.
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
			defer b.Close()
			if _, err := b.Declare(ctx, QueueConfig{Name: "clicks", Durability: other}); !errors.Is(err, ErrModeConflict) {
				t.Fatalf("after restart, declare as %s: %v, want ErrModeConflict", other, err)
			}
			checkReply("declare without a mode after restart", declare(t, ctx, b, QueueConfig{Name: "clicks"}), false)
		})
	}
}

func TestDeclareDefaultsToDurable(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	r := declare(t, ctx, b, QueueConfig{Name: "plain"})
	if r.Config.Durability != Durable || r.Warning != "" || !r.Created {
		t.Fatalf("declare without a mode: %+v", r)
	}
	if c := publish(t, ctx, b, "plain", Message{Body: body(1)}); c.Durability != Durable {
		t.Fatalf("confirm durability %s", c.Durability)
	}
	// Other fields of a re-declare merge; a different partition count
	// conflicts.
	r = declare(t, ctx, b, QueueConfig{Name: "plain", MaxDeliveries: 5})
	if r.Config.MaxDeliveries != 5 || r.Config.Durability != Durable || r.Config.Partitions != 1 {
		t.Fatalf("merged declaration %+v", r.Config)
	}
	if _, err := b.Declare(ctx, QueueConfig{Name: "plain", Partitions: 3}); !errors.Is(err, ErrConflict) {
		t.Fatalf("declare with other partitions: %v, want ErrConflict", err)
	}
}

// TestBufferedConfirmsBeforeSync holds every segment sync at a gate, with the
// background sync off: a buffered publish still confirms and is delivered,
// with no segment sync on its path; a durable publish is neither confirmed
// nor delivered (nor even applied) until the gate opens.
func TestBufferedConfirmsBeforeSync(t *testing.T) {
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	defer probe.Open() // Close syncs
	s := DefaultSettings()
	s.BackgroundSyncIntervalMs = 0
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "buf", Durability: Buffered})
	declare(t, ctx, b, QueueConfig{Name: "dur", Durability: Durable})
	_, bufC := subscribe(t, b, "buf", 10)
	_, durC := subscribe(t, b, "dur", 10)

	probe.Shut()
	before := probe.Matched.Load()

	// Buffered: confirmed and delivered with the gate shut.
	for i := range 5 {
		c := publish(t, ctx, b, "buf", Message{Body: body(i)})
		if c.Durability != Buffered || c.Offset != uint64(i) {
			t.Fatalf("buffered confirm %+v", c)
		}
		if d := bufC.next(t, ctx); string(d.Body) != string(body(i)) || d.Deliveries != 1 {
			t.Fatalf("buffered delivery %d: %q, deliveries %d", i, d.Body, d.Deliveries)
		}
	}
	if n := probe.Matched.Load() - before; n != 0 {
		t.Fatalf("%d segment syncs on the buffered confirm path", n)
	}
	bi := info(t, b, "buf").Partitions[0]
	if bi.WrittenNext != 5 || bi.DurableNext != 0 || bi.UnsyncedRecords != 5 {
		t.Fatalf("buffered partition after confirms: written %d durable %d unsynced %d",
			bi.WrittenNext, bi.DurableNext, bi.UnsyncedRecords)
	}

	// Durable: the publish reaches the OS, its sync stops at the gate, and
	// nothing is confirmed, applied or delivered meanwhile.
	confirmed := make(chan Confirm, 1)
	b.PublishAsync("dur", Message{Body: []byte("durable")}, func(c Confirm, err error) {
		if err != nil {
			t.Errorf("durable publish: %v", err)
		}
		confirmed <- c
	})
	select {
	case <-probe.Held:
	case <-ctx.Done():
		t.Fatal("the durable publish never asked for a sync")
	}
	waitFor(t, ctx, "the durable record written", func() bool {
		return info(t, b, "dur").Partitions[0].WrittenNext == 1
	})
	if in := info(t, b, "dur"); in.Partitions[0].DurableNext != 0 || in.Messages != 0 {
		t.Fatalf("durable queue before its sync: durable %d, %d messages applied", in.Partitions[0].DurableNext, in.Messages)
	}
	select {
	case c := <-confirmed:
		t.Fatalf("durable publish confirmed before its sync: %+v", c)
	default:
	}
	if !durC.empty() {
		t.Fatal("durable message delivered before its sync")
	}

	probe.Open()
	var c Confirm
	select {
	case c = <-confirmed:
	case <-ctx.Done():
		t.Fatal("durable publish not confirmed after the sync")
	}
	if c.Durability != Durable || c.Offset != 0 {
		t.Fatalf("durable confirm %+v", c)
	}
	if d := durC.next(t, ctx); string(d.Body) != "durable" {
		t.Fatalf("durable delivery %q", d.Body)
	}
	if di := info(t, b, "dur").Partitions[0]; di.DurableNext != 1 {
		t.Fatalf("durable partition after confirm: durable %d", di.DurableNext)
	}
}

// TestDurableConfirmAfterSync counts segment syncs: every durable confirm
// is covered by a completed one.
func TestDurableConfirmAfterSync(t *testing.T) {
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	s := DefaultSettings()
	s.BackgroundSyncIntervalMs = 0
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "dur"})
	for i := range 10 {
		before := probe.Matched.Load()
		c := publish(t, ctx, b, "dur", Message{Body: body(i)})
		if probe.Matched.Load() == before {
			t.Fatalf("publish %d confirmed without a segment sync", i)
		}
		if d := info(t, b, "dur").Partitions[0].DurableNext; d <= c.Offset {
			t.Fatalf("confirm at offset %d with the durable frontier at %d", c.Offset, d)
		}
	}
}

func TestInvalidDeclarations(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	long := strings.Repeat("q", 201)
	for _, c := range []QueueConfig{
		{Name: ""},
		{Name: "-dash-first"},
		{Name: ".dot-first"},
		{Name: "has space"},
		{Name: "has/slash"},
		{Name: "ünïcode"},
		{Name: long},
		{Name: "q", Durability: 3},
		{Name: "q", Partitions: -1},
		{Name: "q", Partitions: MaxPartitions + 1},
		{Name: "q", DeadLetter: "q"},
		{Name: "q", DeadLetter: "bad name"},
		{Name: "q", MaxDeliveries: -1},
		{Name: "q", AckDeadline: -time.Second},
		{Name: "q", AckDeadline: time.Microsecond},
		{Name: "q", AckDeadline: MaxAckDeadline + time.Second},
		{Name: "q", MaxBytes: -1},
		{Name: "q", MaxMessages: -1},
		{Name: "q", Overflow: 7},
		{Name: "q", DedupeWindow: -time.Second},
		{Name: "q", DedupeWindow: MaxDedupeWindow + time.Second},
	} {
		if _, err := b.Declare(ctx, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("declare %+v: %v, want ErrInvalid", c, err)
		}
	}
	if names := b.QueueNames(); len(names) != 0 {
		t.Fatalf("invalid declares made queues %v", names)
	}
	if ok := strings.Repeat("q", 200); ValidateName(ok) != nil {
		t.Fatalf("a 200-character name is refused")
	}
	for _, s := range []string{"fast", "Durable", " buffered"} {
		if _, err := ParseDurability(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDurability(%q): %v", s, err)
		}
	}
	if _, err := ParseOverflow("drop-newest"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseOverflow: %v", err)
	}
	for _, mut := range []func(*Settings){
		func(s *Settings) { s.BackgroundSyncIntervalMs = -1 },
		func(s *Settings) { s.BackgroundSyncIntervalMs = 60_001 },
		func(s *Settings) { s.BufferedCoalesce = "never" },
		func(s *Settings) { s.BufferedGapUs = 0 },
	} {
		s := DefaultSettings()
		mut(&s)
		if err := b.UpdateSettings(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("settings %+v: %v, want ErrInvalid", s, err)
		}
	}
	if b.Settings() != DefaultSettings() {
		t.Fatalf("refused settings changed the settings: %+v", b.Settings())
	}

	declare(t, ctx, b, QueueConfig{Name: "q"})
	if _, err := b.Subscribe("q", SubscribeOptions{Prefetch: -1, Deliver: func(Delivery) {}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative prefetch: %v", err)
	}
	if _, err := b.Subscribe("q", SubscribeOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no Deliver: %v", err)
	}
	if _, err := b.Subscribe("nope", SubscribeOptions{Deliver: func(Delivery) {}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("subscribe to a missing queue: %v", err)
	}
	if _, err := b.Publish(ctx, "nope", Message{Body: body(0)}); !errors.Is(err, ErrNotFound) {
		t.Errorf("publish to a missing queue: %v", err)
	}
	if _, err := Open(Options{FS: vfs.NewMem()}); !errors.Is(err, ErrInvalid) {
		t.Errorf("open without a data directory: %v", err)
	}
}
