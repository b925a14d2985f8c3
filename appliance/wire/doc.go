// Package wire holds the frames of Fibril's binary client protocol, shared by
// the broker's server and the Go client. It imports only the standard
// library. docs/protocol.md describes the protocol byte by byte, with the
// connection lifecycle and the meaning of every field.
//
// # Frames
//
// A connection carries frames back to back in each direction:
//
//	+---------------+---------+--------------------------------+
//	| length u32 BE | type u8 | body (length-1 bytes)          |
//	+---------------+---------+--------------------------------+
//
// All integers are big endian (network order). length counts the type byte
// and the body, so the smallest frame (Heartbeat) is 00 00 00 01 04, and
// 1 <= length <= MaxFrame (DefaultMaxFrame, 16 MiB, unless configured). A
// body is the frame's fields in order, with no padding and nothing after the
// last field:
//
//	u8 u16 u32 u64   fixed width, big endian
//	bool             u8, 0 or 1
//	string           u16 byte count | bytes
//	bytes            u32 byte count | bytes
//	headers          u16 count | count × (key string | value string)
//	tags             u32 count | count × u64
//
// Text fields (names, messages, header keys) must be valid UTF-8; opaque
// fields (Token, MessageID, Key, header values, Body) may hold any bytes.
//
// # Versions
//
// Versions 1 and 2 differ in one frame: a version 2 Deliver adds
// Incarnation after Offset and Key after MessageID. Version 3 adds
// DedupeMaxEntries and DedupeMaxBytes at the end of Declare. Version 4
// adds Durability at the end of Confirm, and the SetMode request (a frame
// type older versions do not have). Version 5 adds the queue management
// requests QueueInfo, PurgeQueue and DeleteQueue with their replies
// QueueInfoReply, Purged and Deleted, error code served_elsewhere, the
// Extend frame, and DelayMillis at the end of Nack. A Writer set to an
// older version refuses a Nack with a delay. Version 6 adds PublishedAt at
// the end of Deliver (when the owner took the publish). A Reader and a
// Writer use version 6's layout
// until SetVersion gives them the version HelloOK settled for the
// connection (Hello and HelloOK are the same in all). A Reader set to an
// older version rejects the newer frame types and codes as a peer of that
// version would, and a Writer refuses to send them.
//
// # Invariants
//
//   - Decoding is strict: every length is checked against the bytes that
//     remain before anything is allocated, and a frame decodes only if it
//     uses its body exactly. So a frame that decodes re-encodes to the same
//     bytes, and a Reader allocates in proportion to the bytes it was
//     sent (plus one 64 KiB chunk), however large the lengths and counts
//     they claim.
//   - A length above the limit, a type not in the table, or a body that does
//     not decode is an error matching ErrProtocol (and ErrFrameTooLarge,
//     ErrUnknownFrame or ErrMalformed); the connection cannot be trusted
//     after it and must be closed. Nothing else is closed by it.
//   - A decoded frame owns its memory: the Reader never reuses bytes that a
//     frame it returned points into.
//   - A Writer validates a frame before encoding it and never sends one the
//     peer would reject for its size or shape; such a frame is refused with
//     an error and the Writer stays usable.
//
// Reader and Writer are not safe for concurrent use; a connection has one
// goroutine reading and one (or a mutex) writing.
package wire
