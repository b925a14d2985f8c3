package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTripEveryFrame(t *testing.T) {
	covered := map[FrameType]bool{}
	for _, f := range sampleFrames() {
		covered[f.Type()] = true
		t.Run(f.Type().String(), func(t *testing.T) {
			if f.Type() == TypeDeclared && f.(*Declared).Durability == 0 {
				t.Skip("not valid")
			}
			// Through Decode.
			body := f.AppendBody(nil)
			got, err := Decode(f.Type(), body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, f) {
				t.Fatalf("Decode:\n got %#v\nwant %#v", got, f)
			}
			// Through a Writer and a Reader, on both read paths.
			for _, bufSize := range []int{0, 16} {
				var conn bytes.Buffer
				w := NewWriter(&conn, Options{})
				if err := w.WriteFrame(f); err != nil {
					t.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				wire := bytes.Clone(conn.Bytes())
				r := NewReader(&conn, Options{BufferSize: bufSize})
				got, err := r.ReadFrame()
				if err != nil {
					t.Fatalf("ReadFrame (buffer %d): %v", bufSize, err)
				}
				if !reflect.DeepEqual(got, f) {
					t.Fatalf("ReadFrame (buffer %d):\n got %#v\nwant %#v", bufSize, got, f)
				}
				if !bytes.Equal(mustEncode(t, got), wire) {
					t.Fatalf("re-encoding differs")
				}
			}
		})
	}
	for _, typ := range allTypes() {
		if !covered[typ] {
			t.Errorf("no sample frame of type %s", typ)
		}
	}
}

// The zero value of every frame encodes to the table's minimum body, so the
// table is right about the minimum and about fixed sizes.
func TestMinimumBodies(t *testing.T) {
	for _, f := range sampleFrames() {
		s := specs[f.Type()]
		n := len(f.AppendBody(nil))
		if n < s.minBody || (s.fixed && n != s.minBody) {
			t.Errorf("%s: body of %d bytes; table says min %d fixed %v", f.Type(), n, s.minBody, s.fixed)
		}
		zero := reflect.New(reflect.TypeOf(f).Elem()).Interface().(Frame)
		for v := MinVersion; v <= Version; v++ {
			n := len(zero.AppendBody(nil))
			if vf, ok := zero.(versionedFrame); ok {
				n = len(vf.appendBodyVersion(nil, v))
			}
			if n != minBody(f.Type(), v) {
				t.Errorf("%s: zero body of %d bytes in version %d; table says %d", f.Type(), n, v, minBody(f.Type(), v))
			}
		}
	}
}

// A known layout, byte for byte, to pin the documented encoding.
func TestPublishBytes(t *testing.T) {
	f := &Publish{Corr: 1, Queue: "q", MessageID: "m", Key: "", Headers: []Header{{"a", "b"}}, Body: []byte("hi")}
	want := []byte{
		0, 0, 0, 31, // length: type byte + 30-byte body
		0x20,                   // Publish
		0, 0, 0, 0, 0, 0, 0, 1, // Corr
		0, 1, 'q', // Queue
		0, 1, 'm', // MessageID
		0, 0, // Key
		0, 1, 0, 1, 'a', 0, 1, 'b', // Headers: 1 × (key, value)
		0, 0, 0, 2, 'h', 'i', // Body
	}
	if got := mustEncode(t, f); !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
	if got := mustEncode(t, &Heartbeat{}); !bytes.Equal(got, []byte{0, 0, 0, 1, 4}) {
		t.Fatalf("heartbeat: % x", got)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		frame  Frame
		field  string
		reason string // a part of the reason, if the case checks it
	}{
		{"long queue", &Publish{Queue: longString}, "Queue", ""},
		{"queue not UTF-8", &Declare{Queue: "a\xffb"}, "Queue", ""},
		{"dead letter not UTF-8", &Declare{Queue: "a", DeadLetter: "\xc0"}, "DeadLetter", ""},
		{"header key not UTF-8", &Publish{Queue: "q", Headers: []Header{{"\xff", "v"}}}, "Headers.Key", ""},
		{"long header value", &Deliver{Headers: []Header{{"k", longString}}}, "Headers.Value", ""},
		{"too many headers", &Publish{Queue: "q", Headers: make([]Header, MaxHeaders+1)}, "Headers", ""},
		{"long token", &Hello{Token: longString}, "Token", ""},
		{"long message id", &Deliver{MessageID: longString}, "MessageID", ""},
		{"durability", &Declare{Durability: 3}, "Durability", "value 3 (want 0 to 2)"},
		{"confirm durability", &Confirm{Durability: 7}, "Durability", "value 7 (want 0 to 2)"},
		{"overflow", &Declare{Overflow: 3}, "Overflow", ""},
		{"declared unspecified", &Declared{}, "Durability", ""},
		{"error code 0", &Error{}, "Code", ""},
		{"error code unknown", &SettleError{Code: 999}, "Code", "error code 999 is not defined"},
		{"reason not UTF-8", &Goodbye{Reason: "\xff"}, "Reason", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.frame.Validate()
			var fe *FrameError
			if !errors.As(err, &fe) || !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("Validate = %v, want a malformed *FrameError", err)
			}
			if fe.Field != c.field || fe.Type != c.frame.Type() {
				t.Fatalf("error names %s.%s, want %s.%s", fe.Type, fe.Field, c.frame.Type(), c.field)
			}
			if !strings.Contains(fe.Reason, c.reason) {
				t.Fatalf("reason %q, want it to say %q", fe.Reason, c.reason)
			}
			if _, err := AppendFrame(nil, c.frame); !errors.Is(err, ErrMalformed) {
				t.Fatalf("AppendFrame = %v", err)
			}
		})
	}
	for _, f := range sampleFrames() {
		if f.Type() == TypeDeclared && f.(*Declared).Durability == 0 {
			continue
		}
		if f.Type() == TypeError || f.Type() == TypeSettleError {
			continue // zero codes are tested above
		}
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Type(), err)
		}
	}
}

// An invalid frame encoded without Validate still frames correctly.
func TestAppendBodyTruncatesInvalid(t *testing.T) {
	f := &Goodbye{Reason: longString}
	body := f.AppendBody(nil)
	got, err := Decode(TypeGoodbye, body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.(*Goodbye).Reason); n != MaxStringLen {
		t.Fatalf("reason of %d bytes", n)
	}
}

func TestDeliverLen(t *testing.T) {
	for _, p := range []*Publish{
		{},
		{Queue: "q", MessageID: "id", Key: "k-1", Headers: []Header{{"a", "bc"}, {"", "x"}}, Body: make([]byte, 1000)},
	} {
		d := &Deliver{SubID: 1, Tag: 2, Incarnation: 9, MessageID: p.MessageID, Key: p.Key, Headers: p.Headers, Body: p.Body}
		if got, want := DeliverLen(p), len(mustEncode(t, d))-lengthSize; got != want {
			t.Errorf("DeliverLen = %d, want %d", got, want)
		}
		if got := d.FrameLen(); got != DeliverLen(p) {
			t.Errorf("FrameLen = %d, want %d", got, DeliverLen(p))
		}
		for v := MinVersion; v <= Version; v++ {
			var buf bytes.Buffer
			w := NewWriter(&buf, Options{})
			w.SetVersion(v)
			if err := w.WriteFrame(d); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if got, want := d.FrameLenIn(v), buf.Len()-lengthSize; got != want {
				t.Errorf("FrameLenIn(%d) = %d, want %d", v, got, want)
			}
		}
	}
}

// TestDeliverVersions: a version 1 Deliver has no Incarnation or Key. A
// Writer and a Reader set to version 1 leave them out and read it back
// without them, byte for byte the version 1 layout; set to version 2 they
// carry both; this Deliver in one layout does not decode in the other.
// The same for PublishedAt, which versions 6 and later carry.
func TestDeliverVersions(t *testing.T) {
	d := &Deliver{SubID: 2, Tag: 99, Partition: 1, Offset: 12345, Incarnation: 3, Deliveries: 1,
		MessageID: "m-1", Key: "device-9", Headers: []Header{{"k", "v"}}, Body: []byte("body")}
	v1 := raw(TypeDeliver, u32(2), u64(99), u16(1), u64(12345), u32(1), str("m-1"), u16(1), str("k"), str("v"), u32(4), []byte("body"))
	v2parts := [][]byte{u32(2), u64(99), u16(1), u64(12345), u64(3), u32(1), str("m-1"), str("device-9"),
		u16(1), str("k"), str("v"), u32(4), []byte("body")}
	v2 := raw(TypeDeliver, v2parts...)
	for _, tc := range []struct {
		version uint16
		bytes   []byte
		want    *Deliver
	}{
		{1, v1, &Deliver{SubID: 2, Tag: 99, Partition: 1, Offset: 12345, Deliveries: 1, MessageID: "m-1",
			Headers: []Header{{"k", "v"}}, Body: []byte("body")}},
		{2, v2, d},
	} {
		checkLayout(t, d, tc.version, 3-tc.version, tc.bytes, tc.want)
	}

	// Version 6 adds PublishedAt at the end; version 5 leaves it out.
	d.PublishedAt = 1_700_000_000_123_456_789
	v6 := raw(TypeDeliver, append(v2parts, u64(uint64(d.PublishedAt)))...)
	v5 := *d
	v5.PublishedAt = 0
	checkLayout(t, d, 6, 5, v6, d)
	checkLayout(t, d, 5, 6, v2, &v5)
}

// checkLayout writes f in version v's layout and wants exactly b; reads b
// back as version v and wants want; and wants b malformed in version
// other.
func checkLayout(t *testing.T, f Frame, v, other uint16, b []byte, want Frame) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, Options{})
	w.SetVersion(v)
	if err := w.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("version %d %s:\n got % x\nwant % x", v, f.Type(), buf.Bytes(), b)
	}
	r := NewReader(bytes.NewReader(b), Options{})
	r.SetVersion(v)
	if got, err := r.ReadFrame(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version %d reads %+v (%v), want %+v", v, got, err, want)
	}
	o := NewReader(bytes.NewReader(b), Options{})
	o.SetVersion(other)
	if got, err := o.ReadFrame(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a version %d %s read as version %d: %+v, %v", v, f.Type(), other, got, err)
	}
}

func TestNames(t *testing.T) {
	if s := TypePublish.String(); s != "Publish" {
		t.Error(s)
	}
	if s := FrameType(0x7f).String(); s != "FrameType(0x7f)" {
		t.Error(s)
	}
	if s := CodeStaleTag.String(); s != "stale_tag" {
		t.Error(s)
	}
	if s := ErrorCode(0).String(); s != "code(0)" {
		t.Error(s)
	}
	for c := CodeBadRequest; c <= maxErrorCode; c++ {
		if strings.HasPrefix(c.String(), "code(") {
			t.Errorf("code %d has no name", c)
		}
	}
	if !CodeDiskFull.Retryable() || CodeNotFound.Retryable() {
		t.Error("Retryable")
	}
	if s := DurabilityBuffered.String() + " " + OverflowDropOldest.String(); s != "buffered drop-oldest" {
		t.Error(s)
	}
	h := &Hello{Version: 1, Token: "hunter2", ClientName: "c"}
	if s := h.String(); strings.Contains(s, "hunter2") {
		t.Errorf("Hello.String shows the token: %s", s)
	}
}

func TestErrorFrameIsError(t *testing.T) {
	var err error = &Error{Corr: 3, Code: CodeNotFound, Message: "queue clicks"}
	if err.Error() != "fibril not_found: queue clicks" {
		t.Error(err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Corr != 3 {
		t.Error("errors.As")
	}
	if CodeOf(err) != CodeNotFound {
		t.Error("CodeOf remote")
	}
}

func TestCodeOf(t *testing.T) {
	_, tooLarge := NewReader(bytes.NewReader(u32(DefaultMaxFrame+1)), Options{}).ReadFrame()
	_, unknown := NewReader(bytes.NewReader(raw(0x7f)), Options{}).ReadFrame()
	for _, c := range []struct {
		err  error
		want ErrorCode
	}{
		{nil, 0},
		{tooLarge, CodeTooLarge},
		{unknown, CodeBadRequest},
		{errors.New("disk on fire"), CodeInternal},
	} {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestDeclareVersions: version 3 adds the dedupe table's bounds to
// Declare. Set to version 2, a Writer leaves them out, byte for byte the
// old layout, and a Reader reads that layout; each layout is malformed in
// the other version.
func TestDeclareVersions(t *testing.T) {
	d := &Declare{Corr: 1, Queue: "q", Durability: DurabilityBuffered, Partitions: 2, DedupeWindowMillis: 1000,
		DedupeMaxEntries: 5000, DedupeMaxBytes: 1 << 20}
	head := [][]byte{u64(1), str("q"), u8(uint8(DurabilityBuffered)), u16(2), str(""), u32(0), u32(0), u64(0), u64(0), u8(0), u32(1000)}
	v2 := raw(TypeDeclare, head...)
	v3 := raw(TypeDeclare, append(head, u64(5000), u64(1<<20))...)
	old := *d
	old.DedupeMaxEntries, old.DedupeMaxBytes = 0, 0
	for _, tc := range []struct {
		version, other uint16
		bytes          []byte
		want           *Declare
	}{{2, 3, v2, &old}, {3, 2, v3, d}} {
		checkLayout(t, d, tc.version, tc.other, tc.bytes, tc.want)
	}
}

// TestConfirmVersions: version 4 adds the mode to Confirm. Set to version
// 3, a Writer leaves it out, byte for byte the old layout, and a Reader
// reads that layout; each layout is malformed in the other version. A
// SetMode is no frame of version 3.
func TestConfirmVersions(t *testing.T) {
	c := &Confirm{Corr: 1, Partition: 2, Offset: 3, Durability: DurabilityDurable}
	head := [][]byte{u64(1), u16(2), u64(3), u8(0)}
	v3 := raw(TypeConfirm, head...)
	v4 := raw(TypeConfirm, append(head, u8(uint8(DurabilityDurable)))...)
	old := *c
	old.Durability = DurabilityUnspecified
	for _, tc := range []struct {
		version, other uint16
		bytes          []byte
		want           *Confirm
	}{{3, 4, v3, &old}, {4, 3, v4, c}} {
		checkLayout(t, c, tc.version, tc.other, tc.bytes, tc.want)
	}
	r := NewReader(bytes.NewReader(raw(TypeSetMode, u64(1), str("q"), u8(1))), Options{})
	r.SetVersion(3)
	if _, err := r.ReadFrame(); !errors.Is(err, ErrUnknownFrame) {
		t.Fatalf("a SetMode read as version 3: %v", err)
	}
}

// TestNackVersions: version 5 adds DelayMillis to Nack, and the Extend
// frame. Set to version 4, a Writer leaves the delay out, byte for byte
// the old layout, and a Reader reads that layout; each layout is
// malformed in the other version. A Writer set to version 4 refuses a
// Nack with a delay, which a version 4 server would requeue at once, and
// an Extend, which is no frame of version 4.
func TestNackVersions(t *testing.T) {
	for _, tc := range []struct {
		name string
		nack *Nack
	}{
		{"no delay", &Nack{SubID: 1, Tags: []uint64{7}, Requeue: true}},
		{"discard", &Nack{SubID: 1, Tags: []uint64{7, 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := [][]byte{u32(1), u32(uint32(len(tc.nack.Tags)))}
			for _, tag := range tc.nack.Tags {
				head = append(head, u64(tag))
			}
			requeue := u8(0)
			if tc.nack.Requeue {
				requeue = u8(1)
			}
			head = append(head, requeue)
			v4 := raw(TypeNack, head...)
			v5 := raw(TypeNack, append(head, u32(0))...)
			for v := MinVersion; v <= 4; v++ {
				checkLayout(t, tc.nack, v, 5, v4, tc.nack)
			}
			checkLayout(t, tc.nack, 5, 4, v5, tc.nack)
		})
	}
	delayed := &Nack{SubID: 1, Tags: []uint64{7}, Requeue: true, DelayMillis: 500}
	checkLayout(t, delayed, 5, 4, raw(TypeNack, u32(1), u32(1), u64(7), u8(1), u32(500)), delayed)
	extend := &Extend{SubID: 1, Tags: []uint64{7, 9}}
	extendBytes := raw(TypeExtend, u32(1), u32(2), u64(7), u64(9))
	var buf bytes.Buffer
	w := NewWriter(&buf, Options{})
	w.SetVersion(5)
	if err := w.WriteFrame(extend); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), extendBytes) {
		t.Fatalf("Extend in version 5:\n got % x\nwant % x", buf.Bytes(), extendBytes)
	}
	r := NewReader(bytes.NewReader(extendBytes), Options{})
	r.SetVersion(5)
	if got, err := r.ReadFrame(); err != nil || !reflect.DeepEqual(got, extend) {
		t.Fatalf("version 5 reads %+v (%v), want %+v", got, err, extend)
	}
	for v := MinVersion; v < 5; v++ {
		ow := NewWriter(io.Discard, Options{})
		ow.SetVersion(v)
		if err := ow.WriteFrame(delayed); !errors.Is(err, ErrMalformed) || ow.Buffered() != 0 {
			t.Fatalf("a delayed Nack written as version %d: %v (%d bytes buffered)", v, err, ow.Buffered())
		}
		if err := ow.WriteFrame(extend); !errors.Is(err, ErrUnknownFrame) || ow.Buffered() != 0 {
			t.Fatalf("an Extend written as version %d: %v (%d bytes buffered)", v, err, ow.Buffered())
		}
		or := NewReader(bytes.NewReader(extendBytes), Options{})
		or.SetVersion(v)
		if got, err := or.ReadFrame(); !errors.Is(err, ErrUnknownFrame) {
			t.Fatalf("an Extend read as version %d: %+v, %v", v, got, err)
		}
	}
}

// TestQueueManagementVersions: version 5 adds QueueInfo, PurgeQueue and
// DeleteQueue with their replies, and the served_elsewhere code. Their
// layouts are pinned byte for byte; a Reader set to version 4 rejects
// each as a version 4 peer would (an unknown frame type, an undefined
// code), a Writer set to version 4 refuses to send them, and every frame
// of version 4 keeps its layout in version 5.
func TestQueueManagementVersions(t *testing.T) {
	frames := []struct {
		f     Frame
		bytes []byte
	}{
		{&QueueInfo{Corr: 1, Queue: "q"}, raw(TypeQueueInfo, u64(1), str("q"))},
		{&QueueInfoReply{Corr: 1, Queue: "q", Durability: DurabilityBuffered, Ready: 3, InFlight: 2, Bytes: 50,
			Consumers: 1, Partitions: []PartitionFrontiers{{WrittenNext: 9, DurableNext: 7}, {WrittenNext: 4, DurableNext: 4}}},
			raw(TypeQueueInfoReply, u64(1), str("q"), u8(2), u64(3), u64(2), u64(50), u32(1), str(""),
				u16(2), u64(9), u64(7), u64(4), u64(4))},
		{&PurgeQueue{Corr: 2, Queue: "q"}, raw(TypePurgeQueue, u64(2), str("q"))},
		{&Purged{Corr: 2, Queue: "q", Purged: 5}, raw(TypePurged, u64(2), str("q"), u64(5))},
		{&DeleteQueue{Corr: 3, Queue: "q", IfEmpty: true}, raw(TypeDeleteQueue, u64(3), str("q"), u8(1))},
		{&Deleted{Corr: 3, Queue: "q"}, raw(TypeDeleted, u64(3), str("q"))},
		{&Error{Corr: 4, Code: CodeServedElsewhere, Message: "n2"}, raw(TypeError, u64(4), u16(12), str("n2"))},
	}
	for _, tc := range frames {
		t.Run(tc.f.Type().String(), func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, Options{})
			w.SetVersion(5)
			if err := w.WriteFrame(tc.f); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), tc.bytes) {
				t.Fatalf("version 5:\n got % x\nwant % x", buf.Bytes(), tc.bytes)
			}
			r := NewReader(bytes.NewReader(tc.bytes), Options{})
			r.SetVersion(5)
			if got, err := r.ReadFrame(); err != nil || !reflect.DeepEqual(got, tc.f) {
				t.Fatalf("version 5 reads %+v (%v), want %+v", got, err, tc.f)
			}
			want := ErrUnknownFrame
			if tc.f.Type() == TypeError {
				want = ErrMalformed
			}
			for v := MinVersion; v < 5; v++ {
				old := NewReader(bytes.NewReader(tc.bytes), Options{})
				old.SetVersion(v)
				if got, err := old.ReadFrame(); !errors.Is(err, want) {
					t.Fatalf("read as version %d: %+v, %v; want %v", v, got, err, want)
				}
				ow := NewWriter(io.Discard, Options{})
				ow.SetVersion(v)
				if err := ow.WriteFrame(tc.f); !errors.Is(err, want) || ow.Buffered() != 0 {
					t.Fatalf("written as version %d: %v (%d bytes buffered); want %v", v, err, ow.Buffered(), want)
				}
			}
		})
	}
	// Every frame of version 4 but Nack (TestNackVersions) is byte for
	// byte the same in version 5.
	for _, f := range sampleFrames() {
		if sinceVersion(f.Type()) > 4 || f.Validate() != nil || f.Type() == TypeNack {
			continue
		}
		if e, ok := f.(*Error); ok && !e.Code.validIn(4) {
			continue
		}
		v4, err4 := appendFrame(nil, f, MaxFrameLimit, 4)
		v5, err5 := appendFrame(nil, f, MaxFrameLimit, 5)
		if err4 != nil || err5 != nil || !bytes.Equal(v4, v5) {
			t.Errorf("%s: version 4 % x (%v), version 5 % x (%v)", f.Type(), v4, err4, v5, err5)
		}
	}
}

// Validate runs on every frame written (a Confirm for every publish), so a
// valid frame must cost no allocation: the reasons are formatted only for
// the frames that fail.
func TestValidateAllocatesNothingForValidFrames(t *testing.T) {
	for _, f := range sampleFrames() {
		if f.Validate() != nil {
			continue
		}
		if n := testing.AllocsPerRun(100, func() { _ = f.Validate() }); n != 0 {
			t.Errorf("%s: Validate allocates %.0f times for a valid frame", f.Type(), n)
		}
	}
}
