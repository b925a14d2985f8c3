// Package syncprobe wraps a file system for tests: it counts sync calls and,
// while its gate is shut, holds the syncs of chosen files until the gate
// opens. Tests use it to show what waits for an fsync and what does not.
package syncprobe

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Probe counts and gates syncs.
type Probe struct {
	Matched atomic.Int64  // sync calls on matching files
	All     atomic.Int64  // sync calls on any file or directory
	Held    chan struct{} // receives (without blocking) when a sync stops at the gate

	// Flush models the device's flush time on matching syncs (the in-memory
	// FS syncs instantly, which no disk does). Set it before use.
	Flush time.Duration

	match func(path string) bool
	mu    sync.Mutex    // guards gate
	gate  chan struct{} // nil while open
}

// New wraps fs; match picks the files whose syncs are counted in Matched,
// gated and delayed by Flush.
func New(fs vfs.FS, match func(path string) bool) (*Probe, vfs.FS) {
	p := &Probe{match: match, Held: make(chan struct{}, 1)}
	return p, errorfs.Wrap(fs, errorfs.InjectorFunc(p.inject))
}

func (p *Probe) inject(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	p.All.Add(1)
	if !p.match(op.Path) {
		return nil
	}
	p.Matched.Add(1)
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case p.Held <- struct{}{}:
		default:
		}
		<-gate
	}
	if p.Flush > 0 {
		time.Sleep(p.Flush)
	}
	return nil
}

// Shut makes later matching syncs wait for Open.
func (p *Probe) Shut() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

// Open releases the held syncs and lets later ones through.
func (p *Probe) Open() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
}
