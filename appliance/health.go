package appliance

import (
	"errors"
	"fmt"
)

// ErrUnhealthy is wrapped by Healthy's errors.
var ErrUnhealthy = errors.New("appliance: storage path unhealthy")

// Healthy reports whether the storage path is alive: the broker is open,
// answers (its locks and every partition's are free to take), and no
// partition log has latched after a failed write or sync. A latched log
// stays latched until the broker is reopened, so once Healthy fails it
// keeps failing. It blocks while a lock is held; a caller that needs a
// bound (a watchdog) counts a late answer as a failure.
func (b *Broker) Healthy() error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return fmt.Errorf("%w: broker closed", ErrUnhealthy)
	}
	var parts []*partition
	for _, q := range b.queues {
		parts = append(parts, q.parts...)
	}
	b.mu.RUnlock()
	for _, p := range parts {
		p.mu.Lock()
		p.mu.Unlock() //nolint:staticcheck // taking the lock proves the partition is not wedged
		if st := p.log.Status(); st.Latched {
			return fmt.Errorf("%w: queue %s partition %d log latched: %v", ErrUnhealthy, p.q.config.Load().Name, p.idx, st.LastError)
		}
	}
	return nil
}
