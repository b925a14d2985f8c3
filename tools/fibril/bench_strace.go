package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// countSyncs counts the fsync-family system calls of every thread of pid
// over d with strace -c, per second: /proc has no counter for them. It
// returns -1 without strace.
func countSyncs(ctx context.Context, pid int, d time.Duration) (float64, error) {
	bin, err := exec.LookPath("strace")
	if err != nil {
		return -1, nil
	}
	out, err := os.CreateTemp("", "fibril-bench-strace-*")
	if err != nil {
		return 0, err
	}
	out.Close()
	defer os.Remove(out.Name())
	cmd := exec.Command(bin, "-f", "-c", "-o", out.Name(), "-e", "trace=fsync,fdatasync,sync_file_range,syncfs,msync",
		"-p", strconv.Itoa(pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("strace: %w", err)
	}
	start := time.Now()
	perr := pause(ctx, d)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait() // strace exits non-zero when interrupted; its summary says what it saw
	secs := time.Since(start).Seconds()
	if perr != nil {
		return 0, perr
	}
	b, err := os.ReadFile(filepath.Clean(out.Name()))
	if err != nil {
		return 0, err
	}
	calls, ok := straceTotal(b)
	if !ok {
		// strace writes no summary when nothing matched; an exit without
		// "attached" means it could not attach (no ptrace rights, say).
		if !strings.Contains(stderr.String(), "attached") {
			return -1, nil
		}
		calls = 0
	}
	return float64(calls) / secs, nil
}

// straceTotal reads the calls column of the total line of strace -c's
// summary.
func straceTotal(summary []byte) (int, bool) {
	sc := bufio.NewScanner(bytes.NewReader(summary))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 4 && f[len(f)-1] == "total" {
			n, err := strconv.Atoi(f[3])
			return n, err == nil
		}
	}
	return 0, false
}
