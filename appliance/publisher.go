package appliance

// A Publisher gathers the publishes one client sends back to back, as a
// connection reads them from one buffer, into the partitions' batches
// without starting their appends, and Flush starts them: the publishes a
// read brings go in one append per partition, not one append each while
// the partition happens to be idle. The caller flushes once it has nothing
// more at hand, before it waits for anything, and before any request that
// may depend on a publish it made; nothing waits on a timer. A Publisher
// is used by one goroutine.
type Publisher struct {
	b    *Broker
	held []*partition // partitions holding publishes of this Publisher that no append has started for
	n    int          // publishes held
}

// maxHeld is the most publishes a Publisher holds before it flushes by
// itself, which bounds what the first of them waits for the rest.
const maxHeld = 64

// NewPublisher returns a Publisher for one client's publishes.
func (b *Broker) NewPublisher() *Publisher { return &Publisher{b: b} }

// PublishAsync is Broker.PublishAsync, but an append it would start at once
// waits for Flush, unless the batch is full. Before anything in it waits
// (a partition's pending batches at their bound), it flushes. A publish to
// a queue with limits flushes first and is not held: its admission may
// wait for the publishes held before it, and others' for it.
func (p *Publisher) PublishAsync(queueName string, m Message, done func(Confirm, error)) {
	p.b.publishAsync(queueName, m, done, p)
	if p.n >= maxHeld {
		p.Flush()
	}
}

// Flush starts the appends of the publishes held. Each partition leaves
// the list before its append starts, so a callback that panics on the way
// leaves the others for the next Flush.
func (p *Publisher) Flush() {
	p.n = 0
	for len(p.held) > 0 {
		last := len(p.held) - 1
		part := p.held[last]
		p.held[last] = nil
		p.held = p.held[:last]
		part.release()
	}
}

// hold records that part holds one more of this Publisher's publishes.
func (p *Publisher) hold(part *partition) {
	p.n++
	for _, h := range p.held {
		if h == part {
			return
		}
	}
	p.held = append(p.held, part)
}
