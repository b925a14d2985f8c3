// Package floor measures what the storage underneath a log can do without
// any log on top: the latency of a bare write(2) and fdatasync(2), and the
// throughput of the simplest possible group commit. These are the floor
// (and ceiling) that fibril's log benchmarks are read against.
package floor

import (
	"fmt"
	"os"
	"time"
)

// WriteLatencies appends n records of size bytes to a new file in dir, one
// os.File.Write each, and returns how long each write took. Nothing is
// synced, so this is the cost of copying into the page cache.
func WriteLatencies(dir string, n, size int) ([]time.Duration, error) {
	return withScratchFile(dir, "floor-write-*", func(f *os.File) ([]time.Duration, error) {
		rec := record(size)
		samples := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if _, err := f.Write(rec); err != nil {
				return nil, fmt.Errorf("write: %w", err)
			}
			samples = append(samples, time.Since(start))
		}
		return samples, nil
	})
}

// FdatasyncLatencies appends n records of size bytes to a new file in dir
// and fdatasyncs after each one, returning how long each fdatasync took
// (the writes themselves are not timed). Every sync makes the file longer,
// so it commits the size change as well as the data, as a log append must.
func FdatasyncLatencies(dir string, n, size int) ([]time.Duration, error) {
	return withScratchFile(dir, "floor-fdatasync-*", func(f *os.File) ([]time.Duration, error) {
		rec := record(size)
		samples := make([]time.Duration, 0, n)
		for range n {
			if _, err := f.Write(rec); err != nil {
				return nil, fmt.Errorf("write: %w", err)
			}
			start := time.Now()
			if err := fdatasync(f); err != nil {
				return nil, fmt.Errorf("fdatasync: %w", err)
			}
			samples = append(samples, time.Since(start))
		}
		return samples, nil
	})
}

// withScratchFile creates a file in dir, runs fn on it and removes it.
func withScratchFile(dir, pattern string, fn func(*os.File) ([]time.Duration, error)) (_ []time.Duration, err error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("create scratch file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close scratch file: %w", cerr)
		}
		if rerr := os.Remove(f.Name()); rerr != nil && err == nil {
			err = fmt.Errorf("remove scratch file: %w", rerr)
		}
	}()
	return fn(f)
}

// record returns a size-byte record filled with a repeating non-zero
// pattern, so no layer can treat it as a hole.
func record(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}
