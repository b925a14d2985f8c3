package wire

// Declare creates a queue or checks and updates its declaration. Zero
// fields mean "unspecified": the server default for a new queue, the stored
// value for an existing one.
type Declare struct {
	Corr               uint64
	Queue              string
	Durability         Durability // fixed by the first declare; another mode is CodeConflict
	Partitions         uint16     // fixed at creation; another count is CodeConflict
	DeadLetter         string     // queue for discarded and over-delivered messages
	MaxDeliveries      uint32
	AckDeadlineMillis  uint32
	MaxBytes           uint64
	MaxMessages        uint64
	Overflow           Overflow
	DedupeWindowMillis uint32
	// DedupeMaxEntries and DedupeMaxBytes bound the queue's dedupe
	// table, all partitions together (0: the broker's defaults); version 3 and later.
	DedupeMaxEntries uint64
	DedupeMaxBytes   uint64
}

func (*Declare) Type() FrameType { return TypeDeclare }

func (f *Declare) AppendBody(b []byte) []byte { return f.appendBodyVersion(b, Version) }

func (f *Declare) appendBodyVersion(b []byte, v uint16) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	b = appendU8(b, uint8(f.Durability))
	b = appendU16(b, f.Partitions)
	b = appendString(b, f.DeadLetter)
	b = appendU32(b, f.MaxDeliveries)
	b = appendU32(b, f.AckDeadlineMillis)
	b = appendU64(b, f.MaxBytes)
	b = appendU64(b, f.MaxMessages)
	b = appendU8(b, uint8(f.Overflow))
	b = appendU32(b, f.DedupeWindowMillis)
	if v >= 3 {
		b = appendU64(b, f.DedupeMaxEntries)
		b = appendU64(b, f.DedupeMaxBytes)
	}
	return b
}

func (f *Declare) Validate() error {
	v := validator{typ: TypeDeclare}
	v.text("Queue", f.Queue)
	v.checkf("Durability", f.Durability <= DurabilityBuffered, "value %d (want 0 to 2)", f.Durability)
	v.text("DeadLetter", f.DeadLetter)
	v.checkf("Overflow", f.Overflow <= OverflowDropOldest, "value %d (want 0 to 2)", f.Overflow)
	return v.result()
}

func decodeDeclare(d decoder) (Frame, error) {
	f := &Declare{
		Corr:               d.u64("Corr"),
		Queue:              d.text("Queue"),
		Durability:         Durability(d.enum("Durability", 0, uint8(DurabilityBuffered))),
		Partitions:         d.u16("Partitions"),
		DeadLetter:         d.text("DeadLetter"),
		MaxDeliveries:      d.u32("MaxDeliveries"),
		AckDeadlineMillis:  d.u32("AckDeadlineMillis"),
		MaxBytes:           d.u64("MaxBytes"),
		MaxMessages:        d.u64("MaxMessages"),
		Overflow:           Overflow(d.enum("Overflow", 0, uint8(OverflowDropOldest))),
		DedupeWindowMillis: d.u32("DedupeWindowMillis"),
	}
	if d.version >= 3 {
		f.DedupeMaxEntries = d.u64("DedupeMaxEntries")
		f.DedupeMaxBytes = d.u64("DedupeMaxBytes")
	}
	return f, d.finish()
}

// Declared answers a Declare with the declaration in effect.
type Declared struct {
	Corr       uint64
	Queue      string
	Durability Durability // the mode in effect: durable or buffered, never unspecified
	Partitions uint16
	Created    bool   // this declare created the queue
	Warning    string // for buffered queues, the loss-window warning
}

func (*Declared) Type() FrameType { return TypeDeclared }

func (f *Declared) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	b = appendU8(b, uint8(f.Durability))
	b = appendU16(b, f.Partitions)
	b = appendBool(b, f.Created)
	return appendString(b, f.Warning)
}

func (f *Declared) Validate() error {
	v := validator{typ: TypeDeclared}
	v.text("Queue", f.Queue)
	v.checkf("Durability", f.Durability == DurabilityDurable || f.Durability == DurabilityBuffered,
		"value %d (want 1 or 2)", f.Durability)
	v.text("Warning", f.Warning)
	return v.result()
}

func decodeDeclared(d decoder) (Frame, error) {
	f := &Declared{
		Corr:       d.u64("Corr"),
		Queue:      d.text("Queue"),
		Durability: Durability(d.enum("Durability", uint8(DurabilityDurable), uint8(DurabilityBuffered))),
		Partitions: d.u16("Partitions"),
		Created:    d.bool("Created"),
		Warning:    d.text("Warning"),
	}
	return f, d.finish()
}

// Publish appends a message to a queue. Many may be in flight; each gets a
// Confirm or an Error with its Corr.
type Publish struct {
	Corr      uint64
	Queue     string
	MessageID string // opaque; deduplicated within the queue's dedupe window; "" for none
	Key       string // opaque partition key; equal keys go to the same partition; "" lets the server pick
	Headers   []Header
	Body      []byte
}

func (*Publish) Type() FrameType { return TypePublish }

func (f *Publish) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	b = appendString(b, f.MessageID)
	b = appendString(b, f.Key)
	b = appendHeaders(b, f.Headers)
	return appendBytes(b, f.Body)
}

func (f *Publish) Validate() error {
	v := validator{typ: TypePublish}
	v.text("Queue", f.Queue)
	v.opaque("MessageID", f.MessageID)
	v.opaque("Key", f.Key)
	v.headers(f.Headers)
	v.bytes("Body", f.Body)
	return v.result()
}

func decodePublish(d decoder) (Frame, error) {
	f := &Publish{
		Corr:      d.u64("Corr"),
		Queue:     d.text("Queue"),
		MessageID: d.opaque("MessageID"),
		Key:       d.opaque("Key"),
		Headers:   d.headers(),
		Body:      d.bytes("Body"),
	}
	return f, d.finish()
}

// Confirm says a publish is stored at the queue's durability: written for a
// buffered queue, synced for a durable one.
type Confirm struct {
	Corr      uint64
	Partition uint16
	Offset    uint64
	Duplicate bool // the message id was seen within the dedupe window; Partition and Offset are the original's
	// Durability (version 4) is the mode the publish was confirmed under:
	// durable, synced; buffered, written. A queue's mode can change
	// (SetMode), so it is the promise of this confirm, not of the queue.
	// Unspecified in a frame of an older version.
	Durability Durability
}

func (*Confirm) Type() FrameType { return TypeConfirm }

func (f *Confirm) AppendBody(b []byte) []byte { return f.appendBodyVersion(b, Version) }

func (f *Confirm) appendBodyVersion(b []byte, v uint16) []byte {
	b = appendU64(b, f.Corr)
	b = appendU16(b, f.Partition)
	b = appendU64(b, f.Offset)
	b = appendBool(b, f.Duplicate)
	if v >= 4 {
		b = appendU8(b, uint8(f.Durability))
	}
	return b
}

func (f *Confirm) Validate() error {
	v := validator{typ: TypeConfirm}
	v.checkf("Durability", f.Durability <= DurabilityBuffered, "value %d (want 0 to 2)", f.Durability)
	return v.result()
}

func decodeConfirm(d decoder) (Frame, error) {
	f := &Confirm{
		Corr:      d.u64("Corr"),
		Partition: d.u16("Partition"),
		Offset:    d.u64("Offset"),
		Duplicate: d.bool("Duplicate"),
	}
	if d.version >= 4 {
		f.Durability = Durability(d.enum("Durability", uint8(DurabilityUnspecified), uint8(DurabilityBuffered)))
	}
	return f, d.finish()
}

// SetMode (version 4) changes a live queue's durability mode, fenced: the
// answer is a Declared with the mode in effect once the change took
// effect (Created false), or an Error: conflict while another change of
// the queue is pending, not found, bad request (a cluster node, which
// cannot change a mode yet), unavailable (the sync before a change to
// durable failed; the queue kept its mode).
type SetMode struct {
	Corr       uint64
	Queue      string
	Durability Durability // durable or buffered
}

func (*SetMode) Type() FrameType { return TypeSetMode }

func (f *SetMode) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	return appendU8(b, uint8(f.Durability))
}

func (f *SetMode) Validate() error {
	v := validator{typ: TypeSetMode}
	v.text("Queue", f.Queue)
	v.checkf("Durability", f.Durability == DurabilityDurable || f.Durability == DurabilityBuffered,
		"value %d (want 1 or 2)", f.Durability)
	return v.result()
}

func decodeSetMode(d decoder) (Frame, error) {
	f := &SetMode{
		Corr:       d.u64("Corr"),
		Queue:      d.text("Queue"),
		Durability: Durability(d.enum("Durability", uint8(DurabilityDurable), uint8(DurabilityBuffered))),
	}
	return f, d.finish()
}
