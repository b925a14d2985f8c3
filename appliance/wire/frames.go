package wire

import "fmt"

// Version is the newest protocol version this package speaks, MinVersion
// the oldest. Version 2 adds Incarnation and Key to Deliver, version 3
// the dedupe table's bounds to Declare, version 4 the mode to Confirm and
// the SetMode request, version 5 the queue management requests
// (QueueInfo, PurgeQueue, DeleteQueue), their replies and the
// served_elsewhere error code, version 6 PublishedAt to Deliver; every
// other frame is the same in all six.
// A Reader and a Writer use Version until told the version a connection
// settled on (SetVersion).
const (
	Version    uint16 = 6
	MinVersion uint16 = 1
)

// FrameType is the byte after a frame's length.
type FrameType uint8

// Frame types of versions 1 to 6. 0x0_ is the session, 0x1_ declaring,
// 0x2_ publishing, 0x3_ consuming. Type 0 is never valid.
const (
	TypeHello          FrameType = 0x01 // client → server, first frame
	TypeHelloOK        FrameType = 0x02 // server → client
	TypeError          FrameType = 0x03 // server → client
	TypeHeartbeat      FrameType = 0x04 // either way
	TypeGoodbye        FrameType = 0x05 // either way
	TypeDeclare        FrameType = 0x10 // client → server
	TypeDeclared       FrameType = 0x11 // server → client
	TypeSetMode        FrameType = 0x12 // client → server, version 4
	TypeQueueInfo      FrameType = 0x13 // client → server, version 5
	TypeQueueInfoReply FrameType = 0x14 // server → client, version 5
	TypePurgeQueue     FrameType = 0x15 // client → server, version 5
	TypePurged         FrameType = 0x16 // server → client, version 5
	TypeDeleteQueue    FrameType = 0x17 // client → server, version 5
	TypeDeleted        FrameType = 0x18 // server → client, version 5
	TypePublish        FrameType = 0x20 // client → server
	TypeConfirm        FrameType = 0x21 // server → client
	TypeSubscribe      FrameType = 0x30 // client → server
	TypeSubscribed     FrameType = 0x31 // server → client
	TypeUnsubscribe    FrameType = 0x32 // client → server
	TypeUnsubscribed   FrameType = 0x33 // server → client
	TypeCredit         FrameType = 0x34 // client → server
	TypeDeliver        FrameType = 0x35 // server → client
	TypeAck            FrameType = 0x36 // client → server
	TypeNack           FrameType = 0x37 // client → server
	TypeSettleError    FrameType = 0x38 // server → client
	TypeExtend         FrameType = 0x39 // client → server, version 5
)

func (t FrameType) String() string {
	if name := specs[t].name; name != "" {
		return name
	}
	return fmt.Sprintf("FrameType(0x%02x)", uint8(t))
}

// Known reports whether t is a frame type of the newest protocol version
// (older versions lack some: see docs/protocol.md).
func (t FrameType) Known() bool { return specs[t].decode != nil }

// Frame is one frame of the protocol. Each frame type is a struct in this
// package, used by pointer: a Reader returns *Publish, not Publish.
type Frame interface {
	// Type is the frame's type byte.
	Type() FrameType
	// AppendBody appends the frame's body to dst. It assumes a frame that
	// passes Validate (see codec.go for what it does otherwise).
	AppendBody(dst []byte) []byte
	// Validate reports, as a *FrameError matching ErrMalformed, a field
	// that cannot be encoded or that the peer would reject: a string over
	// MaxStringLen bytes, text that is not UTF-8, an invalid enum value.
	Validate() error
}

// versionedFrame is a frame whose body differs between protocol versions.
// Its AppendBody writes the newest; appendBodyVersion writes version v's,
// leaving out the fields v does not have.
type versionedFrame interface {
	Frame
	appendBodyVersion(dst []byte, v uint16) []byte
}

// Header is one message header. Key is text; Value is opaque.
type Header struct {
	Key, Value string
}

// Hello is the client's first frame: the highest protocol version it speaks,
// its token, and a name for logs and the dashboard.
type Hello struct {
	Version    uint16
	Token      string // opaque; never printed
	ClientName string
}

func (*Hello) Type() FrameType { return TypeHello }

func (f *Hello) AppendBody(b []byte) []byte {
	b = appendU16(b, f.Version)
	b = appendString(b, f.Token)
	return appendString(b, f.ClientName)
}

func (f *Hello) Validate() error {
	v := validator{typ: TypeHello}
	v.opaque("Token", f.Token)
	v.text("ClientName", f.ClientName)
	return v.result()
}

// String prints the frame without its token.
func (f *Hello) String() string {
	return fmt.Sprintf("Hello{Version:%d Token:<%d bytes> ClientName:%q}", f.Version, len(f.Token), f.ClientName)
}

func decodeHello(d decoder) (Frame, error) {
	f := &Hello{Version: d.u16("Version"), Token: d.opaque("Token"), ClientName: d.text("ClientName")}
	return f, d.finish()
}

// HelloOK accepts a Hello: the version the connection speaks from now on,
// the server's limits, and a session id for logs.
type HelloOK struct {
	Version         uint16
	ServerName      string
	SessionID       uint64
	MaxFrame        uint32 // largest frame length the server reads and sends
	HeartbeatMillis uint32 // 0: no heartbeats
}

func (*HelloOK) Type() FrameType { return TypeHelloOK }

func (f *HelloOK) AppendBody(b []byte) []byte {
	b = appendU16(b, f.Version)
	b = appendString(b, f.ServerName)
	b = appendU64(b, f.SessionID)
	b = appendU32(b, f.MaxFrame)
	return appendU32(b, f.HeartbeatMillis)
}

func (f *HelloOK) Validate() error {
	v := validator{typ: TypeHelloOK}
	v.text("ServerName", f.ServerName)
	return v.result()
}

func decodeHelloOK(d decoder) (Frame, error) {
	f := &HelloOK{
		Version:         d.u16("Version"),
		ServerName:      d.text("ServerName"),
		SessionID:       d.u64("SessionID"),
		MaxFrame:        d.u32("MaxFrame"),
		HeartbeatMillis: d.u32("HeartbeatMillis"),
	}
	return f, d.finish()
}

// Error fails the request with the same Corr. Corr 0 is an error of the
// connection itself, and the server closes the connection after it.
// *Error is also a Go error, so a client can return it as is.
type Error struct {
	Corr    uint64
	Code    ErrorCode
	Message string
}

func (*Error) Type() FrameType { return TypeError }

func (f *Error) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendU16(b, uint16(f.Code))
	return appendString(b, f.Message)
}

func (f *Error) Validate() error {
	v := validator{typ: TypeError}
	v.checkf("Code", f.Code.Valid(), "error code %d is not defined", uint16(f.Code))
	v.text("Message", f.Message)
	return v.result()
}

// Error formats the error as "fibril <code>: <message>".
func (f *Error) Error() string {
	if f.Message == "" {
		return "fibril " + f.Code.String()
	}
	return "fibril " + f.Code.String() + ": " + f.Message
}

func decodeError(d decoder) (Frame, error) {
	f := &Error{Corr: d.u64("Corr"), Code: d.code("Code"), Message: d.text("Message")}
	return f, d.finish()
}

// Heartbeat says the sender is alive. Either side sends one when it has sent
// nothing for HeartbeatMillis.
type Heartbeat struct{}

func (*Heartbeat) Type() FrameType            { return TypeHeartbeat }
func (*Heartbeat) AppendBody(b []byte) []byte { return b }
func (*Heartbeat) Validate() error            { return nil }

func decodeHeartbeat(d decoder) (Frame, error) { return &Heartbeat{}, d.finish() }

// Goodbye starts a graceful close. The sender sends nothing after it but
// replies to requests it has already read.
type Goodbye struct {
	Reason string
}

func (*Goodbye) Type() FrameType { return TypeGoodbye }

func (f *Goodbye) AppendBody(b []byte) []byte { return appendString(b, f.Reason) }

func (f *Goodbye) Validate() error {
	v := validator{typ: TypeGoodbye}
	v.text("Reason", f.Reason)
	return v.result()
}

func decodeGoodbye(d decoder) (Frame, error) {
	f := &Goodbye{Reason: d.text("Reason")}
	return f, d.finish()
}
