// Package acceptance is the solo broker's black-box acceptance suite:
// load against real fibrild processes, faults (SIGKILL, power cuts on
// loop-mounted file systems), and a checker that compares what clients
// were promised with what the broker hands back afterwards
// (docs/reliability.md lists the cases and their results).
//
// The fault cases run only with FIBRIL_ACCEPTANCE=1 (make acceptance);
// plain go test runs the checker's unit tests. Every case logs its seed
// and fault schedule, and FIBRIL_SEED=<n> replays one.
//
// # API
//
// History: an append-only JSON-lines file of Events (send, confirm, fail,
// deliver, ack, frontier, fault, restart, drain, note). Keep it on a file
// system that is not under test; Record buffers, a goroutine writes and
// fsyncs every 50 ms, Sync and Close do so at once.
//
//	h, err := CreateHistory(filepath.Join(t.TempDir(), "history.jsonl"), 0)
//	h.Note("seed %d schedule %v", seed, schedule)
//	h.CutBegins()             // right before a power cut (see Loss.AfterCut)
//	h.Fault("power cut")      // after the fault took effect
//	h.Restart()               // just before the broker starts again
//	events, err := ReadHistory(h.Path())
//
// Broker: one fibrild on a data directory through its restarts; every
// start after the first listens on the same client address, so clients
// reconnect. DefaultArgs (--storage.min_free 0, --log.level debug) come
// first, then Args.
//
//	err := BuildFibrild(ctx, "../fibrild", bin)
//	b := &Broker{Bin: bin, DataDir: dir, Args: []string{"--storage.segment_size", "1MiB"}}
//	err = b.Start(ctx); b.Kill(); err = b.Stop(10*time.Second)
//	qi, err := b.QueueInfo(ctx, "q")       // admin API: frontiers, last sync, counts
//	listening, err := b.StartAndKillAfter(ctx, 700*time.Millisecond)
//
// Load: publishers (each its own connection, increasing Seq, message ID
// "<pub>.<seq>", Body(id, size)) and acking consumers on QueueSpecs, all
// recorded in the History; a poller records each partition's durable
// frontier and last sync from the admin API every 100 ms.
//
//	queues := []QueueSpec{{Name: "d", Partitions: 2}, {Name: "b", Buffered: true, Partitions: 2}}
//	r, err := StartLoad(ctx, LoadOptions{Addr: b.Addr(), Admin: b.Admin, History: h, Queues: queues, Seed: seed})
//	err = r.WaitConfirmed(ctx, r.Counts().Confirmed+200) // progress
//	err = r.RecordFrontiers(ctx)                        // right before a fault
//	r.Stop()
//
// Verify: after the last restart, Drain reads every queue to its end with
// a fresh consumer (acking, recording drain events; ErrStuck when a queue
// does not hand out or settle all it counts), then Verify judges the whole
// history:
//
//	n, err := Drain(ctx, h, b.Addr(), b.Admin(), queues)
//	h.Sync()
//	rep, err := VerifyHistory(h.Path(), queues) // streams; Verify([]Event) for events in hand
//	t.Log(rep)                      // Report.String
//	if f := rep.Failures(); len(f) > 0 { t.Fatal(...) }
//
// Report: Lost (confirmed, never acked or drained), Holes (lost while a
// later confirm of the same publisher to the same partition in the same
// epoch survived), Unexpected, Duplicates (counted, allowed),
// OrderViolations, AckedReturned (counted, allowed), and for each loss its
// Age (confirm to fault), AfterCut (confirmed after History.CutBegins:
// an emulated cut leaves the broker running, so a sync in flight at the
// shutdown can report success; no real power cut allows that confirm, and
// it is counted, not held against the queue) and whether the last frontier recorded before the
// fault covered it (AfterSync: the only loss a buffered queue allows).
// Failures lists what the queues' promises forbid.
//
// Loop mounts: an image file of a given size and type, mkfs, mount -o
// loop. PowerCut is FS_IOC_SHUTDOWN without log flush (what xfs_io -x -c
// shutdown does, issued in-process), which both XFS and ext4 implement:
// unsynced data is dropped and the running broker gets EIO. Errors wrap ErrNoLoop when the machine
// cannot loop-mount (a case must then fail, not skip).
//
//	l, err := NewLoopFS(ctx, LoopOptions{FS: "xfs", Dir: t.TempDir()})
//	err = l.PowerCut(ctx); b.Kill(); err = l.Unmount(ctx); err = l.Mount(ctx)
//	defer l.Close()
package acceptance
