package floor

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestGroupCommitterCoversEveryRecordWithFewerSyncs(t *testing.T) {
	const writers, perWriter, size = 64, 20, 128
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	g := NewGroupCommitter(f)
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			rec := make([]byte, size)
			for i := range rec {
				rec[i] = byte(w + 1) // tag records by writer
			}
			for range perWriter {
				if err := g.Append(rec); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Append: %v", err)
	}

	const records = writers * perWriter
	if got := g.Durable(); got != records {
		t.Errorf("Durable() = %d, want %d", got, records)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != records*size {
		t.Fatalf("file holds %d bytes, want %d", len(data), records*size)
	}
	perTag := make(map[byte]int)
	for off := 0; off < len(data); off += size {
		rec := data[off : off+size]
		for _, b := range rec {
			if b != rec[0] {
				t.Fatalf("record at offset %d is torn", off)
			}
		}
		perTag[rec[0]]++
	}
	for w := range writers {
		if got := perTag[byte(w+1)]; got != perWriter {
			t.Errorf("writer %d has %d records in the file, want %d", w, got, perWriter)
		}
	}
	syncs := g.Syncs()
	if syncs == 0 || syncs >= records {
		t.Errorf("Syncs() = %d, want between 1 and %d (fewer syncs than records)", syncs, records-1)
	}
	t.Logf("%d records in %d fdatasyncs", records, syncs)
}

func TestRunGroupCommit(t *testing.T) {
	res, err := RunGroupCommit(context.Background(), t.TempDir(), 64, 500, 128)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 500 || res.Syncs == 0 || res.Syncs >= 500 || res.Elapsed <= 0 {
		t.Errorf("RunGroupCommit = %+v, want 500 records in 1..499 syncs", res)
	}
}

func TestRawLatencies(t *testing.T) {
	dir := t.TempDir()
	w, err := WriteLatencies(dir, 10, 128)
	if err != nil || len(w) != 10 {
		t.Fatalf("WriteLatencies = %d samples, %v", len(w), err)
	}
	s, err := FdatasyncLatencies(dir, 5, 128)
	if err != nil || len(s) != 5 {
		t.Fatalf("FdatasyncLatencies = %d samples, %v", len(s), err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("scratch files left behind: %v", left)
	}
}
