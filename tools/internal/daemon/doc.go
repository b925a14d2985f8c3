// Package daemon is fibrild without its flags: the configuration
// (fibril.toml), the logger, and Run, which serves a broker until its
// context ends and then shuts it down cleanly.
//
// # Configuration
//
// A config file is TOML with the sections of default.toml, which is built
// in: [server] (the client protocol), [admin] (the admin HTTP API and /metrics),
// [storage] and [log]. A file is read over the built-in defaults, so it
// needs only the keys it changes; an unknown key is an error that names
// it. Sizes are strings with a unit ("64MiB"), durations Go durations
// ("10s"). Config.Set sets any key from text, which is how fibrild's flags
// (--server.listen, --storage.data_dir, ...) override the file.
//
// The defaults suit a small device: the client protocol on 127.0.0.1:7420
// and the admin API on 127.0.0.1:7421, without authentication, data under ./data, a 1 MiB tail cache per
// partition, the broker's small Pebble cache and memtables.
//
// # Memory
//
// The Go runtime honours the GOMEMLIMIT environment variable by itself
// (for example GOMEMLIMIT=256MiB): it collects harder as the heap nears
// the limit. Run logs the limit in force when one is set.
//
// # Shutdown
//
// When Run's context ends it stops the admin API (requests in progress
// see their context end) and admission (server.Shutdown: a
// Goodbye to every client, replies to requests already read, connections
// closed and their unsettled deliveries released), bounded by
// ShutdownTimeout, then closes the broker, which checkpoints and syncs
// every queue log and closes the metadata store. Only then does Run
// return.
//
// # Fault injection (test builds only)
//
// Built with -tags faultinject, which only the acceptance suite does
// (make build and make package never), Run stores through pebble's
// errorfs and the admin API gains /debug/fault, which fails every write or
// every fdatasync of one queue's segment files until disarmed
// (fault_inject.go). Such a binary logs a warning at start.
package daemon
