package wire_test

import (
	"fmt"
	"net"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// A client's handshake and one publish, against a server that answers
// whatever it is sent.
func Example() {
	client, server := net.Pipe()
	go fakeServer(server)
	defer client.Close()

	r := wire.NewReader(client, wire.Options{})
	w := wire.NewWriter(client, wire.Options{})
	w.WriteFrame(&wire.Hello{Version: wire.Version, Token: "t0ken", ClientName: "example"})
	w.Flush()
	f, err := r.ReadFrame()
	if err != nil {
		fmt.Println(err)
		return
	}
	ok := f.(*wire.HelloOK)
	w.SetMaxFrame(int(ok.MaxFrame)) // the server's limit
	fmt.Println("session", ok.SessionID, "version", ok.Version)

	w.WriteFrame(&wire.Publish{Corr: 1, Queue: "clicks", Body: []byte("hello")})
	w.Flush()
	switch f, _ := r.ReadFrame(); f := f.(type) {
	case *wire.Confirm:
		fmt.Println("confirmed", f.Corr, "at", f.Partition, f.Offset)
	case *wire.Error:
		fmt.Println("failed:", f)
	}
	// Output:
	// session 7 version 6
	// confirmed 1 at 0 41
}

func fakeServer(conn net.Conn) {
	defer conn.Close()
	r := wire.NewReader(conn, wire.Options{})
	w := wire.NewWriter(conn, wire.Options{})
	for {
		f, err := r.ReadFrame()
		if err != nil {
			w.WriteFrame(&wire.Error{Code: wire.CodeOf(err), Message: err.Error()})
			w.Flush()
			return
		}
		switch f := f.(type) {
		case *wire.Hello:
			w.WriteFrame(&wire.HelloOK{Version: wire.Version, ServerName: "fake", SessionID: 7,
				MaxFrame: uint32(r.MaxFrame()), HeartbeatMillis: 5000})
		case *wire.Publish:
			w.WriteFrame(&wire.Confirm{Corr: f.Corr, Offset: 41})
		}
		if r.Buffered() == 0 {
			w.Flush()
		}
	}
}
