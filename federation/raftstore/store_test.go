package raftstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

func openMem(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("raft", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entry(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: i / 3, Type: raft.LogCommand, Data: []byte{byte(i), 'x'},
		Extensions: []byte("ext"), AppendedAt: time.Unix(1700000000, int64(i))}
}

func TestLogStore(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty FirstIndex %d", f)
	}
	if l, _ := s.LastIndex(); l != 0 {
		t.Fatalf("empty LastIndex %d", l)
	}
	var batch []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		batch = append(batch, entry(i))
	}
	if err := s.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entry(11)); err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 1 {
		t.Fatalf("FirstIndex %d, want 1", f)
	}
	if l, _ := s.LastIndex(); l != 11 {
		t.Fatalf("LastIndex %d, want 11", l)
	}
	var got raft.Log
	if err := s.GetLog(7, &got); err != nil {
		t.Fatal(err)
	}
	want := entry(7)
	if got.Index != 7 || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
		!bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("GetLog(7) = %+v, want %+v", got, want)
	}
	if err := s.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 5 {
		t.Fatalf("FirstIndex after deleting 1..4: %d, want 5", f)
	}
	if err := s.GetLog(3, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a deleted entry: %v, want ErrLogNotFound", err)
	}
	if err := s.DeleteRange(9, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.LastIndex(); l != 8 {
		t.Fatalf("LastIndex after deleting the tail: %d, want 8", l)
	}
}

func TestStableStore(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if v, err := s.Get([]byte("missing")); err != nil || len(v) != 0 {
		t.Fatalf("missing key: %q, %v", v, err)
	}
	if v, err := s.GetUint64([]byte("missing")); err != nil || v != 0 {
		t.Fatalf("missing uint64: %d, %v", v, err)
	}
	if err := s.Set([]byte("vote"), []byte("node-2")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("term"), 42); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get([]byte("vote")); string(v) != "node-2" {
		t.Fatalf("vote %q", v)
	}
	if v, _ := s.GetUint64([]byte("term")); v != 42 {
		t.Fatalf("term %d", v)
	}
	if _, err := s.GetUint64([]byte("vote")); err == nil {
		t.Fatal("a 6-byte value read as a uint64")
	}
}

// Every write is synced: a power cut right after it returns keeps the
// entries, the term and the vote.
func TestSurvivesPowerCut(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openMem(t, fs)
	if err := s.StoreLogs([]*raft.Log{entry(1), entry(2), entry(3)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	s = openMem(t, crashed)
	defer s.Close()
	if l, _ := s.LastIndex(); l != 3 {
		t.Fatalf("LastIndex after the power cut: %d, want 3", l)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 5 {
		t.Fatalf("term after the power cut: %d, want 5", v)
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(entry(1)))
	f.Add(encodeLog(&raft.Log{}))
	f.Add([]byte{1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(b, &l); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again := encodeLog(&l)
		var l2 raft.Log
		if err := decodeLog(again, &l2); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if l2.Term != l.Term || l2.Type != l.Type || !bytes.Equal(l2.Data, l.Data) || !bytes.Equal(l2.Extensions, l.Extensions) {
			t.Fatalf("round trip changed the entry: %+v → %+v", l, l2)
		}
	})
}
