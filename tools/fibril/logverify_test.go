package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/wal"
)

// writeTestLog writes n records (types 1 and 2 alternating, text
// payloads) to a log in dir with 4 KiB segments, so it spans several, and
// closes it. It returns the segment files, sorted.
func writeTestLog(t *testing.T, dir string, n int) []string {
	t.Helper()
	l, err := wal.Open(dir, wal.Options{SegmentSize: 4 << 10, BackgroundSyncInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e := wal.Entry{Type: byte(1 + i%2), Payload: []byte(fmt.Sprintf("message number %04d %s", i, strings.Repeat("x", 60)))}
		if _, err := l.Append(context.Background(), []wal.Entry{e}, wal.AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v: want at least 3", segs, err)
	}
	sort.Strings(segs)
	return segs
}

// damage xors the byte at pos of file with 0x5a.
func damage(t *testing.T, file string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[0] ^ 0x5a}, pos); err != nil {
		t.Fatal(err)
	}
}

// recordEnd returns the byte position after the last record of the
// segment file: the first zero length after the 32-byte header.
func recordEnd(t *testing.T, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pos := int64(32)
	for pos+17 <= int64(len(data)) {
		n := int64(data[pos]) | int64(data[pos+1])<<8 | int64(data[pos+2])<<16 | int64(data[pos+3])<<24
		if data[pos+16] == 0 {
			break
		}
		pos += 17 + n
	}
	return pos
}

func TestLogVerify(t *testing.T) {
	root := t.TempDir()
	clean, torn, corrupt := filepath.Join(root, "a", "0"), filepath.Join(root, "b", "0"), filepath.Join(root, "c", "0")
	writeTestLog(t, clean, 120)
	segs := writeTestLog(t, torn, 120)
	last := segs[len(segs)-1]
	if err := os.Truncate(last, recordEnd(t, last)-10); err != nil {
		t.Fatal(err)
	}
	segs = writeTestLog(t, corrupt, 120)
	damage(t, segs[1], 32+17+5) // a payload byte of the second segment's first record

	runCLI("log", "verify", clean).want(t, 0, ": 3 segments, 120 records", "")
	runCLI("log", "verify", torn).want(t, 0, "torn tail in segment", "")
	r := runCLI("log", "verify", corrupt)
	r.want(t, 1, "CORRUPT", "1 of 1 logs are corrupt")
	// One flipped byte costs its record, not the segment's others.
	for _, want := range []string{"damaged: segment 00000000000000000041 bytes 32 to ", "offsets 41 to 42: 1 records lost (checksum mismatch)", "lost: 1 records", ": 3 segments, 119 records"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("verify corrupt: want %q in %s", want, r.stdout)
		}
	}
	before, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}

	// The whole tree at once, as JSON, with a progress bar.
	r = runCLI("log", "verify", root, "--json", "--progress")
	r.want(t, 1, "", "verifying [")
	lines := jsonLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("verify --json: %d lines: %s", len(lines), r.stdout)
	}
	byDir := map[string]map[string]any{}
	for _, l := range lines {
		byDir[l["dir"].(string)] = l
	}
	if a := byDir[filepath.Join("a", "0")]; a["records"] != 120.0 || a["torn_tail"] != nil || len(a["corrupt"].([]any)) != 0 {
		t.Errorf("clean log: %v", a)
	}
	if b := byDir[filepath.Join("b", "0")]; b["records"] != 119.0 || b["torn_tail"] == nil || b["lost_records"] != 0.0 {
		t.Errorf("torn log: %v", b)
	}
	c := byDir[filepath.Join("c", "0")]
	if cs := c["corrupt"].([]any); len(cs) != 1 || cs[0].(map[string]any)["pos"] != 32.0 {
		t.Errorf("corrupt log: %v", c)
	}
	if ds := c["damaged"].([]any); len(ds) != 1 || c["lost_records"] != 1.0 ||
		ds[0].(map[string]any)["from"] != 41.0 || ds[0].(map[string]any)["to"] != 42.0 || ds[0].(map[string]any)["lost"] != 1.0 {
		t.Errorf("damaged ranges of the corrupt log: %v", c)
	}
	if a := byDir[filepath.Join("a", "0")]; len(a["damaged"].([]any)) != 0 || a["lost_records"] != 0.0 {
		t.Errorf("clean log: %v", a)
	}
	after, err := os.ReadFile(segs[1])
	if err != nil || string(after) != string(before) {
		t.Fatalf("verify changed a segment (%v)", err)
	}

	runCLI("log", "verify", filepath.Join(root, "missing")).want(t, 3, "", "does not exist")
	runCLI("log", "verify", t.TempDir()).want(t, 3, "", "no segment files")
	runCLI("log", "verify").want(t, 2, "", "missing DIR")
}

func TestLogDump(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	segs := writeTestLog(t, dir, 120)

	r := runCLI("log", "dump", dir, "--max", "2")
	r.want(t, 0, "0\tpublish\t80\tmessage number 0000 xxxx", "")
	if strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, "1\tack\t80\t") {
		t.Fatalf("dump --max 2: %s", r.stdout)
	}
	r = runCLI("log", "dump", dir, "--from", "50", "--max", "10", "--json", "--preview", "4")
	lines := jsonLines(t, r.stdout)
	if r.code != 0 || len(lines) != 10 || lines[0]["offset"] != 50.0 || lines[0]["preview"] != "mess..." ||
		lines[9]["offset"] != 59.0 || lines[0]["type_name"] != "publish" {
		t.Fatalf("dump --from --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	var line dumpLine
	if err := json.Unmarshal([]byte(strings.Split(r.stdout, "\n")[1]), &line); err != nil || line.Type != 2 || line.Length != 80 {
		t.Fatalf("dump line %+v, %v", line, err)
	}

	damage(t, segs[1], 32+17+5)
	r = runCLI("log", "dump", dir)
	r.want(t, 1, "0\tpublish", "checksum mismatch")
	runCLI("log", "dump", filepath.Dir(dir)).want(t, 3, "", "name one log directory")
}

func TestPreviewBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello world", 5, "hello..."},
		{"\x00\x01\x02", 10, "000102"},
		{"héllo", 2, "h..."}, // the cut splits é
		{"a\nb", 10, "610a62"},
	} {
		if got := previewBytes([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("previewBytes(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
