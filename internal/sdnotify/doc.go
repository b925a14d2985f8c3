// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): one unix datagram per state change, written to the
// socket named by $NOTIFY_SOCKET. A name starting with '@' is an abstract
// socket. Outside systemd (NOTIFY_SOCKET unset) every call is a no-op that
// returns nil, so the daemon calls it unconditionally.
//
// The protocol is small enough to implement directly: newline-separated
// KEY=VALUE assignments in a single datagram, no reply.
package sdnotify
