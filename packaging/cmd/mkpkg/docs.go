package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// writeDocs writes the compressed man pages and the changelog into dir,
// compressed as Debian policy wants (gzip -9n: no name, no time stamp).
func writeDocs(dir, version string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, page := range []string{"fibrild.8", "fibril.1"} {
		text, err := os.ReadFile(filepath.Join("packaging", "man", page))
		if err != nil {
			return err
		}
		if err := writeGzip(filepath.Join(dir, page+".gz"), text); err != nil {
			return err
		}
	}
	return writeGzip(filepath.Join(dir, "changelog.gz"), changelog(version, buildTime()))
}

// changelog is a Debian-format changelog whose one entry is this build.
// The project's history is its git log; the package records which build
// it is.
func changelog(version string, when time.Time) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "fibril (%s) unstable; urgency=medium\n\n", version)
	fmt.Fprintf(&b, "  * Fibril %s.\n  * Changes: https://github.com/fibril-edge/fibril/commits\n\n", version)
	fmt.Fprintf(&b, " -- Fibril developers <fibril-edge@users.noreply.github.com>  %s\n", when.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	return b.Bytes()
}

// buildTime is SOURCE_DATE_EPOCH when set (reproducible builds), else now.
func buildTime() time.Time {
	var secs int64
	if _, err := fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), &secs); err == nil {
		return time.Unix(secs, 0)
	}
	return time.Now()
}

func writeGzip(path string, data []byte) error {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
