package federation

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// ErrRaftImpostor is why a raft connection closes when one of its RPCs
// claims to come from another node than the one its certificate names.
var ErrRaftImpostor = errors.New("raft RPC from another node than its certificate names")

// ErrRaftNotMember is why a raft connection closes when its certificate
// names a node that is not in this node's raft configuration.
var ErrRaftNotMember = errors.New("raft RPC from a node that is not in the cluster's configuration")

// hashicorp/raft's network transport hands a decoded RPC to raft without
// the connection it came on, so it cannot tell which certificate sent it.
// Over mutual TLS, the mux puts a peerCheckedConn between an accepted raft
// connection and the transport: it decodes each RPC as the transport
// will, refuses one whose header names another node than the peer's
// certificate, and passes the rest on re-encoded. A certificate the
// cluster CA signed for one node therefore cannot vote, lead or install a
// snapshot as another, and one signed for a node that is not in the raft
// configuration cannot take part at all (see Node.raftPeerKnown).
//
// The framing is the transport's: a type byte, the request in msgpack,
// and for a snapshot install its Size bytes of data.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

// peerCheckedConn reads, through a pipe, only the RPCs its checker let
// through; writes (the responses) go straight to the connection.
type peerCheckedConn struct {
	net.Conn
	pr *io.PipeReader
}

// checkRaftPeer starts checking c's RPCs against node, the id its
// certificate names, which known must accept; wg counts the checker until
// c ends.
func checkRaftPeer(c net.Conn, node string, known func(string) bool, wg *sync.WaitGroup, log *slog.Logger) net.Conn {
	pr, pw := io.Pipe()
	pc := &peerCheckedConn{Conn: c, pr: pr}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := relayChecked(bufio.NewReader(c), pw, node, known)
		if errors.Is(err, ErrRaftImpostor) || errors.Is(err, ErrRaftNotMember) {
			log.Warn("closing a raft connection", "peer", c.RemoteAddr().String(), "err", err)
		}
		pw.CloseWithError(err)
		c.Close()
	}()
	return pc
}

func (c *peerCheckedConn) Read(p []byte) (int, error) { return c.pr.Read(p) }

func (c *peerCheckedConn) Close() error {
	c.pr.Close()
	return c.Conn.Close()
}

// relayChecked copies RPCs from r to w until r ends, one claims another
// sender than node, or known refuses node.
func relayChecked(r *bufio.Reader, w io.Writer, node string, known func(string) bool) error {
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	// The transport encodes times in msgpack's older form unless told
	// otherwise; the relay keeps to it.
	bw := bufio.NewWriter(w)
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	enc := codec.NewEncoder(bw, mh)
	for {
		t, err := r.ReadByte()
		if err != nil {
			return err
		}
		if !known(node) { // before anything of the RPC is decoded
			return fmt.Errorf("%w: %q", ErrRaftNotMember, node)
		}
		req, err := newRaftRequest(t)
		if err != nil {
			return err
		}
		if err := dec.Decode(req); err != nil {
			return fmt.Errorf("decode raft RPC %d: %w", t, err)
		}
		if id := string(req.GetRPCHeader().ID); id != node {
			return fmt.Errorf("%w: it claims %q, its certificate names %q", ErrRaftImpostor, id, node)
		}
		if err := bw.WriteByte(t); err != nil {
			return err
		}
		if err := enc.Encode(req); err != nil {
			return err
		}
		if is, ok := req.(*raft.InstallSnapshotRequest); ok {
			if is.Size < 0 {
				return fmt.Errorf("raft snapshot install of %d bytes", is.Size)
			}
			if _, err := io.CopyN(bw, r, is.Size); err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
}

// newRaftRequest is the request an RPC of type t decodes into.
func newRaftRequest(t uint8) (raft.WithRPCHeader, error) {
	switch t {
	case rpcAppendEntries:
		return &raft.AppendEntriesRequest{}, nil
	case rpcRequestVote:
		return &raft.RequestVoteRequest{}, nil
	case rpcInstallSnapshot:
		return &raft.InstallSnapshotRequest{}, nil
	case rpcTimeoutNow:
		return &raft.TimeoutNowRequest{}, nil
	case rpcRequestPreVote:
		return &raft.RequestPreVoteRequest{}, nil
	}
	return nil, fmt.Errorf("unknown raft RPC type %d", t)
}
