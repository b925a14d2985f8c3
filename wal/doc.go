// Package wal is the segment log under every queue partition: an
// append-only sequence of checksummed records in segment files, with two
// frontiers that say honestly how far the records got.
//
//   - written (WrittenNext): handed to the kernel with write(). Survives a
//     process crash, not a power loss.
//   - durable (DurableNext): covered by a completed fdatasync. Never above
//     written.
//
// Records still in the writer's staging buffer are never exposed as a
// completion point. An append names a Boundary: AfterFlush completes at
// written, AfterFsync at durable, AfterNextFsync at durable too but by the
// next sync something else starts (another append, the byte bound, the
// background timer, SyncSoon).
//
// # Invariants
//
//   - One writer goroutine owns the active segment. Appenders hand it
//     batches over a channel; it writes every batch waiting with one write()
//     (group write) and hands syncs to a syncer goroutine, at most one in
//     flight, so writes go on while a sync runs (group commit).
//   - A completed write or sync wakes exactly the appends it completes, in
//     offset order. Watchers of a frontier (WaitWritten, WaitDurable) sit in
//     a heap by target; an advance pops only those it satisfies.
//   - Background sync: when written > durable and the interval has passed
//     since the last sync started, one sync is submitted; idle logs arm no
//     timer. Once SyncBytesThreshold bytes are unsynced a sync starts at
//     once, and past twice that appends wait for it.
//   - A failed write or sync latches the log: pending and later appends fail
//     with ErrLatched, the written frontier falls back to the durable end,
//     and latched-cut.pending records that end so the next Open cuts the
//     log there before anything reads it. A failed sync is never retried.
//     When the marker cannot be written either, the process remembers the
//     cut for its own Opens and Close writes the marker once it can: the
//     lost records may still read back from the page cache, and a new
//     descriptor's sync would not report the error the old one did.
//   - Records never cross segments. Rollover syncs the outgoing segment
//     inline; the new segment's header and directory entry are synced by the
//     next sync before any record in it counts as durable.
//   - Retention (AdvanceHead) never passes the durable frontier and removes
//     only whole segments below the head, off the writer goroutine.
//   - Rebase moves an empty log forward to a base offset (a replica starting
//     at its owner's head): it removes the empty segment and syncs the
//     directory before creating and syncing the segment at the base, so a
//     crash leaves either the old empty log or the rebased one.
//
// # On-disk format
//
// A log is a directory:
//
//	LOCK                       flock held while the log is open
//	00000000000000000000.seg   segment, named by the offset of its first record
//	00000000000000004096.seg   ...the last one is the active segment
//	EPOCH                      epoch of the last Seal (absent until one)
//	INCARNATION                the log's incarnation, and the end of its last
//	                           clean Close (absent until the first Close)
//	latched-cut.pending        present only after a latch: the offset to cut to
//	<base>.seg.quarantined     a sealed segment with a corrupt header set aside
//	                           (Quarantine): never deleted; its offsets read as
//	                           a hole
//	<base>.seg.<from>-<to>.damaged
//	                           a copy of a damaged range of that segment, which
//	                           held offsets [from, to): never deleted; those
//	                           offsets read as a hole
//
// A segment starts with a 32-byte header and holds records back to back:
//
//	+--------+--------+---------+------+------+-------+
//	| "FIBRLOG1" | base u64 | version u32 | 0 u32 | 0 u32 | crc u32 |   header
//	+--------+--------+---------+------+------+-------+
//	| len u32 | crc u32 | offset u64 | type u8 | payload (len bytes) |   record
//	| len u32 | crc u32 | offset u64 | type u8 | payload ...         |   record
//	| 00 00 00 00 ...  zeros (preallocated space) or end of file     |
//
// All integers are little endian. A record's crc is CRC32C over its length,
// offset, type and payload. Type 0 is invalid, so zero-filled space (a
// preallocated segment, or the zeros ext4 leaves after a power cut) reads as
// the end of the records.
//
// A record that does not verify is a torn tail or damage (resync.go). The
// scan looks for the next byte position where a record with a plausible
// offset (at or above the one expected, at most one more per 17 bytes
// skipped) decodes and verifies. Found, the bytes before it are a damaged
// range: copied to a .damaged file, their offsets a hole (reads fail with
// *HoleError), counted by LostRecords, and the records after it serve. Not
// found, or found only past an aligned all-zero 512-byte sector (space a
// write never reached), or its own bytes up to the next sector boundary
// are all zero, the bad record is a torn tail. In a sealed segment,
// whose records must reach the next segment's base, zeros are damage too and
// a bad record with nothing valid after it loses the offsets up to there. EPOCH and latched-cut.pending hold a u64 and its
// CRC32C, and are replaced atomically (temporary file, sync, rename,
// directory sync). INCARNATION holds two u64s (the incarnation, and the
// clean end plus one, 0 while open) and their CRC32C, replaced the same
// way.
//
// Segments are preallocated with fallocate, ahead of the writer
// (prealloc.go): a new segment reserves 256 KiB, so an idle log costs that
// much disk rather than a segment, and the rest of the segment (or
// Options.PreallocAhead at a time) once the writer reaches the end of it.
// PreallocExtend (the default, measured faster: see docs/performance.md)
// sets the file size with each reservation, so only the fdatasync after
// one has a size change to write; PreallocKeepSize reserves blocks
// without changing the size. A reservation the disk has no room for
// refuses the append with ErrNoSpace before anything is written.
//
// # Recovery
//
// Open carries out these steps, in order, before anything can read the log
// (recover.go; each step has a test):
//
//  1. Create the directory if needed and take its LOCK.
//  2. List the segment files and sort them by base offset; remove leftover
//     temporary files; read EPOCH.
//  3. If latched-cut.pending exists, remove every segment that starts past
//     its offset and sync the directory; step 5 stops at that offset.
//  4. Open the sealed segments (all but the last) and check their headers. A
//     bad header marks that segment corrupt (RecoveryReport.Corrupt); reads
//     in its range fail with its *CorruptionError. Quarantined segment files
//     become holes, from their base to the next segment's, and the .damaged
//     files of sealed segments become holes of their offsets: reads there
//     fail with a *HoleError naming the range. Sealed segments are otherwise
//     not scanned at open, so start-up is bounded by the size of one
//     segment: they are indexed on first read, and checked in full by the
//     scrub (Options.ScrubBytesPerSecond, scrub.go) in the background. Both
//     resync past damage and turn it into holes as step 5 does.
//  5. Scan the active segment from its header with large preads, checking
//     every record's checksum, offset and type, and build its sparse index.
//     A missing or all-zero header (created, never synced) gets a fresh one.
//     The scan stops at a zero header (the clean end), at the cut offset, or
//     at a torn tail, which RecoveryReport.Stop names by segment, byte
//     position and offset. A bad record with valid records after it is
//     damage: the scan resyncs at the next valid record and goes on.
//     Options.OnRecover sees every record the scan keeps, so a caller can
//     rebuild its state in the same read (after a hole, in offset order).
//     Each damaged range is then copied aside and its offsets made a hole
//     (step 5c: RecoveryReport.Damaged, LostRecords); its bytes stay in the
//     segment, where the next open's scan finds them again.
//  6. Cut everything after the last valid record: truncate the file there
//     and preallocate again (or, where the file cannot be truncated, write
//     zeros over the rest), so no stale record can ever be read back as a
//     new one.
//  7. fdatasync the active segment and the directory, so records a process
//     crash left in the page cache are durable before they are published;
//     then remove latched-cut.pending and sync the directory again.
//  8. Publish WrittenNext = DurableNext = the end of the valid records, and
//     the head at the first segment's base.
//  9. Settle the incarnation (incarnation.go): keep INCARNATION's if the
//     last run closed cleanly exactly at this end with no torn tail, else
//     start the next one (a power cut, crash or cut may have dropped
//     offsets that were handed out, and new appends will reuse them).
//     Write it, marked not closed cleanly, before the writer and syncer
//     start. A clean Close writes it again with the end it closed at.
package wal
