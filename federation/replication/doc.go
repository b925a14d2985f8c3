// Package replication is the cluster's data plane: an owner pushes each
// partition's records to its followers over one stream per (partition,
// follower) (the federation package carries every stream between two
// nodes on one multiplexed connection, a link), the followers append them to their copies and report written
// and durable progress, and the owner's gate (gate.go) turns that progress
// into the confirm and delivery boundary of the partition.
//
// # Goroutines and state
//
// Sender (sender.go), on the owner, one per stream: a goroutine that reads
// the owner's log and writes batches, and one that reads the follower's
// positions and feeds the gate. Follower (follower.go), on every node,
// serves the streams it accepts: per stream, the reading loop appends
// batches, one goroutine waits for the appends' completions, and two
// watch the copy's written and durable frontiers and report them. The
// Follower is also the node's store of copies (copies.go), one wal.Log each
// under <dir>/<queue>/<incarnation>/<partition>; its mutex guards the open
// copies, and a copy is opened, and one not open removed, under it. Gate
// holds each follower's reported position under its mutex; Wait blocks an
// owner's applier until enough copies hold a record.
//
// # Protocol
//
// The replication protocol runs on one stream per (partition,
// follower), a net.Conn opened by the owner. Every frame is
//
//	len u32 (of what follows) | type u8 | body
//
// little endian, strings and payloads as u32 length + bytes:
//
//	Hello    owner → follower  epoch u64 | incarnation u64 | durability u8 | partition u32 | head u64 | queue | owner id |
//	                           u32 n | n × (instance u64 | from u64)   (the owner's history, history.go)
//	Position follower → owner  written u64 | durable u64 (both "next": one past the last record)
//	Batch    owner → follower  first u64 | catch-up u8 (0 or 1) | count u32 | count × (type u8 | payload)
//	Refuse   follower → owner  reason
//	Pull     follower → owner  from u64 | max bytes u32
//	Head     owner → follower  offset u64 (the owner's head, after its retention moved it)
//
// The follower first asks the control state whether it follows the
// partition (FollowerOptions.Accept: the assignment names the Hello's
// owner, this node among the followers, the same incarnation, and an epoch
// no higher than the Hello's) and Refuses the stream otherwise. The
// incarnation (the raft index of the queue's declaration) keeps a queue
// deleted and declared again under the same name from finding the old
// queue's copies: each incarnation has its own copy.
//
// Then the follower checks that its copy is a prefix of the owner's log:
// every record it holds lies where the owner's history says the instance
// that wrote it wrote (history.go; an owner starts a new instance at every
// open of the partition's log, since a power cut may have cut it back). A
// copy holding records the owner's log does not (the owner came back
// shorter and wrote new records there) is refused as diverged and its
// position never reported, so the owner's gate never counts it; which
// history the cluster keeps is recovery's decision. A copy that passes
// records, synced, that what it takes from here on is the owner's history.
// The owner, too, counts a follower's position only after checking it
// against its own log.
//
// Retention: before a batch, the owner sends its log's head whenever its
// retention moved it; the follower drops the segments below it, never past
// what it has synced itself, so a copy's disk use stays bounded like its
// owner's.
//
// Frames are read into buffers that grow as their bytes arrive, up to
// MaxFrame: announcing a frame costs a peer nothing.
//
// The follower answers an accepted Hello with its Position. A copy that
// ends before the owner's head first moves up to the head, so that a new
// follower of a queue whose first records retention has removed can
// start; a copy holding records that all lie before the head (its node
// was down while the owner's retention passed it) is rebuilt: marked as
// catching up (no witness), emptied and started at the head. The owner then sends Batches from that position in one of two modes:
//
//   - Push (early replication), while the follower is within the
//     sender's CatchUpLag of the owner's written end and at or above what
//     the owner's tail cache holds: batches go out as soon as records are
//     written, pipelined, and the follower appends them AfterFlush for a
//     buffered queue, AfterFsync for a durable one.
//   - Catch-up, further behind: the owner sends one Batch flagged
//     catch-up and nothing more until the follower Pulls. The follower
//     appends each catch-up batch AfterFsync and, once it is synced, sends
//     Pull from its durable position (which is where the batch ended); the
//     owner answers each Pull with exactly one Batch, read from its
//     segment files. Each batch is thus synced before the next is read.
//     When a Pull finds the follower close enough again, the answer is a
//     push batch and the stream goes back to push.
//
// The follower reports a Position after each append completes and
// whenever its durable frontier moves, in both modes; a Pull also counts
// as a position whose written and durable parts are its from. Written and
// durable travel in separate fields; nothing durable ever carries a
// written position.
package replication
