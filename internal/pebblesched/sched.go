// Package pebblesched is a Pebble compaction scheduler that never wakes an
// idle process. Pebble's default scheduler samples its compaction budget
// on a 100 ms ticker for as long as the database is open; this one grants
// compactions only when Pebble asks (TrySchedule), when one finishes
// (Done) and when Pebble says the budget may have grown (after a flush),
// so a broker with nothing to do stays asleep. The metadata store and the
// cluster's raft log store both use it.
package pebblesched

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Scheduler grants compactions up to the database's own concurrency
// limit. Use a new one per database: Register binds it to one.
type Scheduler struct {
	db   pebble.DBForCompaction // set by Register, before any other call
	poke chan struct{}          // a grant may be possible; owned by run
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex // guards the fields below
	running    int        // compactions granted and not yet done
	stopped    bool       // Unregister was called: grant nothing more
	granting   bool       // one caller is granting; others wait on idle
	idle       *sync.Cond // signalled when granting ends
	lastBudget int        // the budget as last sampled
}

var (
	_ pebble.CompactionScheduler   = (*Scheduler)(nil)
	_ pebble.CompactionGrantHandle = (*Scheduler)(nil)
)

// New returns a scheduler for one database.
func New() *Scheduler {
	s := &Scheduler{poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// Register binds the scheduler to its database and starts the goroutine
// that answers pokes. Pebble calls it once, at open.
func (s *Scheduler) Register(_ int, db pebble.DBForCompaction) {
	s.db = db
	go s.run()
}

// run grants what a poke made possible; it sleeps between pokes.
func (s *Scheduler) run() {
	defer close(s.done)
	for {
		select {
		case <-s.poke:
			s.mu.Lock()
			s.grantAndUnlock()
		case <-s.stop:
			return
		}
	}
}

// Unregister stops granting and waits for a grant in progress. Pebble
// calls it once, at close.
func (s *Scheduler) Unregister() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for s.granting {
		s.idle.Wait()
	}
}

// TrySchedule grants one compaction if the budget has room.
func (s *Scheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false, nil
	}
	s.lastBudget = s.db.GetAllowedWithoutPermission()
	if s.lastBudget > s.running {
		s.running++
		return true, s
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission is Pebble's word that the budget may
// have grown (after a flush). The caller may hold the database's mutex,
// which granting takes, so the grant happens on run's goroutine.
func (s *Scheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	budget := s.db.GetAllowedWithoutPermission()
	grew := budget > s.lastBudget
	s.lastBudget = budget
	s.mu.Unlock()
	if grew {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// Started, MeasureCPU and CumulativeStats are the grant handle's reports;
// this scheduler does not pace compactions.
func (s *Scheduler) Started()                                          {}
func (s *Scheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *Scheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done ends one granted compaction and grants what its end made possible.
func (s *Scheduler) Done() {
	s.mu.Lock()
	s.running--
	s.grantAndUnlock()
}

// grantAndUnlock grants waiting compactions up to the budget, one granter
// at a time. Called with mu held; returns with it released. Pebble's
// Schedule takes the database's mutex, so mu is released around it.
func (s *Scheduler) grantAndUnlock() {
	defer s.mu.Unlock()
	for s.granting {
		s.idle.Wait()
	}
	if s.stopped {
		return
	}
	s.lastBudget = s.db.GetAllowedWithoutPermission()
	room := s.lastBudget - s.running
	if room <= 0 {
		return
	}
	s.granting = true
	s.mu.Unlock()
	for ; room > 0; room-- {
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting || !s.db.Schedule(s) {
			break
		}
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.granting = false
	s.idle.Broadcast()
}
