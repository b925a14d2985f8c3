package wire

// Subscribe starts deliveries from a queue under a SubID the client picks.
// The server keeps at most Prefetch deliveries (plus any Credit granted)
// unsettled on the subscription.
type Subscribe struct {
	Corr     uint64
	SubID    uint32
	Queue    string
	Prefetch uint32
}

func (*Subscribe) Type() FrameType { return TypeSubscribe }

func (f *Subscribe) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendU32(b, f.SubID)
	b = appendString(b, f.Queue)
	return appendU32(b, f.Prefetch)
}

func (f *Subscribe) Validate() error {
	v := validator{typ: TypeSubscribe}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodeSubscribe(d decoder) (Frame, error) {
	f := &Subscribe{Corr: d.u64("Corr"), SubID: d.u32("SubID"), Queue: d.text("Queue"), Prefetch: d.u32("Prefetch")}
	return f, d.finish()
}

// Subscribed answers a Subscribe; deliveries for SubID come only after it.
type Subscribed struct {
	Corr       uint64
	SubID      uint32
	Partitions uint16 // partitions the subscription reads
}

func (*Subscribed) Type() FrameType { return TypeSubscribed }

func (f *Subscribed) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendU32(b, f.SubID)
	return appendU16(b, f.Partitions)
}

func (*Subscribed) Validate() error { return nil }

func decodeSubscribed(d decoder) (Frame, error) {
	f := &Subscribed{Corr: d.u64("Corr"), SubID: d.u32("SubID"), Partitions: d.u16("Partitions")}
	return f, d.finish()
}

// Unsubscribe ends a subscription. Its unsettled deliveries are released
// for redelivery; settles sent before the Unsubscribe are applied first.
type Unsubscribe struct {
	Corr  uint64
	SubID uint32
}

func (*Unsubscribe) Type() FrameType { return TypeUnsubscribe }

func (f *Unsubscribe) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	return appendU32(b, f.SubID)
}

func (*Unsubscribe) Validate() error { return nil }

func decodeUnsubscribe(d decoder) (Frame, error) {
	f := &Unsubscribe{Corr: d.u64("Corr"), SubID: d.u32("SubID")}
	return f, d.finish()
}

// Unsubscribed answers an Unsubscribe: no Deliver for SubID follows it, and
// the SubID may be used again. Sent with Corr 0, unasked, it says the
// broker ended the subscription by itself: its queue was deleted, or the
// node stopped serving it (it moved to another node of a cluster). The
// client may subscribe again under the same SubID: a queue that moved is
// then consumed from its new owner, a deleted one is not found. Settles of
// its deliveries are stale from then on; the owner delivers them again.
type Unsubscribed struct {
	Corr  uint64
	SubID uint32
}

func (*Unsubscribed) Type() FrameType { return TypeUnsubscribed }

func (f *Unsubscribed) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	return appendU32(b, f.SubID)
}

func (*Unsubscribed) Validate() error { return nil }

func decodeUnsubscribed(d decoder) (Frame, error) {
	f := &Unsubscribed{Corr: d.u64("Corr"), SubID: d.u32("SubID")}
	return f, d.finish()
}

// Credit raises a subscription's window of unsettled deliveries by Credit.
type Credit struct {
	SubID  uint32
	Credit uint32
}

func (*Credit) Type() FrameType { return TypeCredit }

func (f *Credit) AppendBody(b []byte) []byte {
	b = appendU32(b, f.SubID)
	return appendU32(b, f.Credit)
}

func (*Credit) Validate() error { return nil }

func decodeCredit(d decoder) (Frame, error) {
	f := &Credit{SubID: d.u32("SubID"), Credit: d.u32("Credit")}
	return f, d.finish()
}

// Deliver hands one message to a subscription under a delivery tag.
// Incarnation and Key are fields of version 2: a version 1 Deliver has
// neither (they decode as 0 and "", and are left out when encoding it).
// PublishedAt is a field of version 6 (0 before, and left out).
type Deliver struct {
	SubID     uint32
	Tag       uint64 // never 0; settles this delivery, on this subscription and connection only
	Partition uint16
	Offset    uint64
	// Incarnation is the incarnation of the partition log the message was
	// written in, so that (Partition, Offset, Incarnation) names one
	// message across restarts.
	Incarnation uint64
	Deliveries  uint32 // 1 on the first delivery
	MessageID   string // opaque
	Key         string // opaque; the key it was published with
	Headers     []Header
	Body        []byte
	// PublishedAt is when the queue's owner took the publish, in Unix
	// nanoseconds of its clock; 0 when unknown. With the publisher's own
	// send time on the same clock, it splits a message's latency into
	// publish to receive and receive to deliver.
	PublishedAt int64
}

func (*Deliver) Type() FrameType { return TypeDeliver }

func (f *Deliver) AppendBody(b []byte) []byte { return f.appendBodyVersion(b, Version) }

func (f *Deliver) appendBodyVersion(b []byte, v uint16) []byte {
	b = appendU32(b, f.SubID)
	b = appendU64(b, f.Tag)
	b = appendU16(b, f.Partition)
	b = appendU64(b, f.Offset)
	if v >= 2 {
		b = appendU64(b, f.Incarnation)
	}
	b = appendU32(b, f.Deliveries)
	b = appendString(b, f.MessageID)
	if v >= 2 {
		b = appendString(b, f.Key)
	}
	b = appendHeaders(b, f.Headers)
	b = appendBytes(b, f.Body)
	if v >= 6 {
		b = appendU64(b, uint64(f.PublishedAt))
	}
	return b
}

func (f *Deliver) Validate() error {
	v := validator{typ: TypeDeliver}
	v.opaque("MessageID", f.MessageID)
	v.opaque("Key", f.Key)
	v.headers(f.Headers)
	v.bytes("Body", f.Body)
	return v.result()
}

func decodeDeliver(d decoder) (Frame, error) {
	f := &Deliver{SubID: d.u32("SubID"), Tag: d.u64("Tag"), Partition: d.u16("Partition"), Offset: d.u64("Offset")}
	if d.version >= 2 {
		f.Incarnation = d.u64("Incarnation")
	}
	f.Deliveries = d.u32("Deliveries")
	f.MessageID = d.opaque("MessageID")
	if d.version >= 2 {
		f.Key = d.opaque("Key")
	}
	f.Headers = d.headers()
	f.Body = d.bytes("Body")
	if d.version >= 6 {
		f.PublishedAt = int64(d.u64("PublishedAt"))
	}
	return f, d.finish()
}

// Ack settles deliveries as done. Fire and forget: only a tag that cannot
// be settled gets an answer, a SettleError.
type Ack struct {
	SubID uint32
	Tags  []uint64
}

func (*Ack) Type() FrameType { return TypeAck }

func (f *Ack) AppendBody(b []byte) []byte {
	b = appendU32(b, f.SubID)
	return appendTags(b, f.Tags)
}

func (f *Ack) Validate() error {
	v := validator{typ: TypeAck}
	v.tags("Tags", f.Tags)
	return v.result()
}

func decodeAck(d decoder) (Frame, error) {
	f := &Ack{SubID: d.u32("SubID"), Tags: d.tags("Tags")}
	return f, d.finish()
}

// Nack settles deliveries as not done: Requeue releases them for
// redelivery; otherwise they are discarded (to the dead-letter queue if
// one is declared). Fire and forget, like Ack.
//
// DelayMillis (version 5) delays a requeue: the messages are ready again
// only after that many milliseconds, and the subscription stops holding
// them at once (its credit comes back). 0 requeues at once, and without
// Requeue it is ignored. Older versions have no such field: a Writer set
// to one refuses a Nack with a delay rather than requeue at once.
type Nack struct {
	SubID       uint32
	Tags        []uint64
	Requeue     bool
	DelayMillis uint32
}

func (*Nack) Type() FrameType { return TypeNack }

func (f *Nack) AppendBody(b []byte) []byte { return f.appendBodyVersion(b, Version) }

func (f *Nack) appendBodyVersion(b []byte, v uint16) []byte {
	b = appendU32(b, f.SubID)
	b = appendTags(b, f.Tags)
	b = appendBool(b, f.Requeue)
	if v >= 5 {
		b = appendU32(b, f.DelayMillis)
	}
	return b
}

func (f *Nack) Validate() error {
	v := validator{typ: TypeNack}
	v.tags("Tags", f.Tags)
	return v.result()
}

func decodeNack(d decoder) (Frame, error) {
	f := &Nack{SubID: d.u32("SubID"), Tags: d.tags("Tags"), Requeue: d.bool("Requeue")}
	if d.version >= 5 {
		f.DelayMillis = d.u32("DelayMillis")
	}
	return f, d.finish()
}

// Extend (version 5) resets the ack deadline of deliveries the
// subscription holds: each must now be settled within the queue's ack
// deadline from when the server handles the frame. Fire and forget, like
// Ack: only a tag the subscription does not hold gets an answer, a
// SettleError.
type Extend struct {
	SubID uint32
	Tags  []uint64
}

func (*Extend) Type() FrameType { return TypeExtend }

func (f *Extend) AppendBody(b []byte) []byte {
	b = appendU32(b, f.SubID)
	return appendTags(b, f.Tags)
}

func (f *Extend) Validate() error {
	v := validator{typ: TypeExtend}
	v.tags("Tags", f.Tags)
	return v.result()
}

func decodeExtend(d decoder) (Frame, error) {
	f := &Extend{SubID: d.u32("SubID"), Tags: d.tags("Tags")}
	return f, d.finish()
}

// SettleError says one tag of an Ack, Nack or Extend could not be settled
// (or extended).
type SettleError struct {
	SubID   uint32
	Tag     uint64
	Code    ErrorCode
	Message string
}

func (*SettleError) Type() FrameType { return TypeSettleError }

func (f *SettleError) AppendBody(b []byte) []byte {
	b = appendU32(b, f.SubID)
	b = appendU64(b, f.Tag)
	b = appendU16(b, uint16(f.Code))
	return appendString(b, f.Message)
}

func (f *SettleError) Validate() error {
	v := validator{typ: TypeSettleError}
	v.checkf("Code", f.Code.Valid(), "error code %d is not defined", uint16(f.Code))
	v.text("Message", f.Message)
	return v.result()
}

func decodeSettleError(d decoder) (Frame, error) {
	f := &SettleError{SubID: d.u32("SubID"), Tag: d.u64("Tag"), Code: d.code("Code"), Message: d.text("Message")}
	return f, d.finish()
}
