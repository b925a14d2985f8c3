package federation

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// A member's certificate speaks raft as that member and no other: on every
// other node, a vote request signed by n2's certificate but claiming to
// come from a third node is not answered and its connection closes, while
// the same request claiming n2 is answered. A certificate for a node that
// is not a member is not answered at all.
func TestRaftRPCsAreCheckedAgainstTheCertificate(t *testing.T) {
	nodeTLS, _ := clusterCerts(t)
	c := startCluster(t, 3, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	_, asN2 := nodeTLS("n2")
	for _, target := range []string{"n1", "n3"} {
		other := map[string]string{"n1": "n3", "n3": "n1"}[target]
		for _, claim := range []string{"n2", other} {
			_, err := requestVote(t, c.addrs[target], asN2, claim)
			switch {
			case claim == "n2" && err != nil:
				t.Fatalf("n2's vote request to %s as n2: %v", target, err)
			case claim == other && err == nil:
				t.Fatalf("n2's certificate had a vote request answered by %s as %s", target, claim)
			case claim == other && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
				t.Fatalf("n2's vote request to %s as %s: %v, want the connection closed", target, claim, err)
			}
		}
	}
	// A certificate the cluster CA signed for a node that is not in the
	// raft configuration speaks raft as nobody, itself included.
	_, asN9 := nodeTLS("n9")
	for _, target := range []string{"n1", "n3"} {
		if _, err := requestVote(t, c.addrs[target], asN9, "n9"); err == nil {
			t.Fatalf("%s answered a vote request from n9, which is not a member", target)
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("n9's vote request to %s: %v, want the connection closed", target, err)
		}
	}
	if c.leader() == "" {
		t.Fatal("the cluster lost its leader")
	}
}

// requestVote sends one stale vote request (term 0, answered with a
// refusal and harmless to the cluster) to addr's raft over TLS as cli,
// its header claiming id.
func requestVote(t *testing.T, addr string, cli *tls.Config, id string) (*raft.RequestVoteResponse, error) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	w := bufio.NewWriter(conn)
	w.WriteByte(protoRaft)
	w.WriteByte(rpcRequestVote)
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	req := raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax,
		ID: []byte(id), Addr: []byte("127.0.0.1:1")}, Term: 0}
	if err := codec.NewEncoder(w, mh).Encode(&req); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	dec := codec.NewDecoder(bufio.NewReader(conn), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return nil, err
	}
	var resp raft.RequestVoteResponse
	if err := dec.Decode(&resp); err != nil {
		return nil, err
	}
	if rpcErr != "" {
		return nil, errors.New(rpcErr)
	}
	return &resp, nil
}

// The relay passes every kind of RPC on as the transport will decode it,
// a snapshot install with its data, and stops at the first impostor.
func TestRaftRelayKeepsEachRPC(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("127.0.0.1:7")}
	at := time.Unix(1_800_000_000, 123).UTC()
	reqs := []struct {
		t   uint8
		req raft.WithRPCHeader
	}{
		{rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 4, PrevLogEntry: 9, PrevLogTerm: 3, LeaderCommitIndex: 8,
			Entries: []*raft.Log{{Index: 10, Term: 4, Type: raft.LogCommand, Data: []byte("cmd"), AppendedAt: at}}}},
		{rpcRequestVote, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 5, LastLogIndex: 10, LastLogTerm: 4}},
		{rpcRequestPreVote, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 5, LastLogIndex: 10, LastLogTerm: 4}},
		{rpcTimeoutNow, &raft.TimeoutNowRequest{RPCHeader: hdr}},
		{rpcInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: 1, Term: 5, LastLogIndex: 10,
			LastLogTerm: 4, Size: 5, Configuration: []byte("conf")}},
	}
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	var in bytes.Buffer
	enc := codec.NewEncoder(&in, mh)
	for _, r := range reqs {
		in.WriteByte(r.t)
		if err := enc.Encode(r.req); err != nil {
			t.Fatal(err)
		}
		if r.t == rpcInstallSnapshot {
			in.WriteString("snap!")
		}
	}
	impostor := raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n3")}, Term: 6}
	in.WriteByte(rpcRequestVote)
	if err := enc.Encode(&impostor); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := relayChecked(bufio.NewReader(&in), &out, "n2", func(string) bool { return true }); !errors.Is(err, ErrRaftImpostor) {
		t.Fatalf("relay ended with %v, want ErrRaftImpostor", err)
	}
	r := bufio.NewReader(&out)
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	for _, want := range reqs {
		typ, err := r.ReadByte()
		if err != nil || typ != want.t {
			t.Fatalf("type %d, %v; want %d", typ, err, want.t)
		}
		got, _ := newRaftRequest(typ)
		if err := dec.Decode(got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want.req) {
			t.Fatalf("relayed %#v, want %#v", got, want.req)
		}
		if typ == rpcInstallSnapshot {
			data := make([]byte, 5)
			if _, err := io.ReadFull(r, data); err != nil || string(data) != "snap!" {
				t.Fatalf("snapshot data %q, %v", data, err)
			}
		}
	}
	if rest, _ := io.ReadAll(r); len(rest) != 0 {
		t.Fatalf("the impostor's RPC was relayed: %d bytes", len(rest))
	}
}

// Whatever bytes an authenticated peer sends on a raft connection, the
// relay ends with an error or passes on RPCs that name the peer.
func FuzzRaftRelay(f *testing.F) {
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	for _, s := range []struct {
		t uint8
		r raft.WithRPCHeader
	}{
		{rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2")}, Term: 1,
			Entries: []*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}}},
		{rpcRequestVote, &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2")}, Term: 2}},
		{rpcInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2")}, Size: 3}},
	} {
		var b bytes.Buffer
		b.WriteByte(s.t)
		if err := codec.NewEncoder(&b, mh).Encode(s.r); err != nil {
			f.Fatal(err)
		}
		b.WriteString("abc")
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		err := relayChecked(bufio.NewReader(bytes.NewReader(data)), &out, "n2", func(string) bool { return true })
		if err == nil {
			t.Fatal("the relay ended without an error")
		}
		r := bufio.NewReader(&out)
		dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
		for {
			typ, err := r.ReadByte()
			if err != nil {
				return
			}
			req, err := newRaftRequest(typ)
			if err != nil {
				t.Fatalf("relayed an RPC of type %d", typ)
			}
			if err := dec.Decode(req); err != nil {
				t.Fatalf("relayed an RPC that does not decode: %v", err)
			}
			if id := string(req.GetRPCHeader().ID); id != "n2" {
				t.Fatalf("relayed an RPC from %q", id)
			}
			if is, ok := req.(*raft.InstallSnapshotRequest); ok {
				io.CopyN(io.Discard, r, is.Size)
			}
		}
	})
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// A raft RPC from a node that is not in the configuration is refused at
// its type byte, before any of it is decoded: 32 MiB of entries from a
// non-member cost no memory.
func TestRaftRelayRefusesANonMemberBeforeReadingItsRPC(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteByte(rpcAppendEntries)
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n9")}}
	for range 32 {
		req.Entries = append(req.Entries, &raft.Log{Data: make([]byte, 1<<20)})
	}
	if err := codec.NewEncoder(&buf, mh).Encode(req); err != nil {
		t.Fatal(err)
	}
	total := int64(buf.Len())
	cr := &countingReader{r: &buf}
	err := relayChecked(bufio.NewReader(cr), io.Discard, "n9", func(string) bool { return false })
	if !errors.Is(err, ErrRaftNotMember) {
		t.Fatalf("err %v", err)
	}
	if cr.n > 1<<20 {
		t.Fatalf("read %d of %d bytes from a non-member before refusing it", cr.n, total)
	}
}
