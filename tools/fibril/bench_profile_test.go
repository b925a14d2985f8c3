package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// "fibril bench fibrild-profiled" serves as fibrild does, and once
// stopped with SIGTERM has written the CPU profile, the allocation profile
// and the execution trace it was asked for.
func TestBenchProfiledFibrildWritesItsProfiles(t *testing.T) {
	cli, _ := binaries(t)
	dir := t.TempDir()
	cpu, allocs, trace := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "allocs.pprof"), filepath.Join(dir, "run.trace")
	wrapper := filepath.Join(dir, "fibrild-profiled")
	script := "#!/bin/sh\nexec " + strconv.Quote(cli) + " bench fibrild-profiled --cpuprofile " + strconv.Quote(cpu) +
		" --memprofile " + strconv.Quote(allocs) + " --trace " + strconv.Quote(trace) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: wrapper, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	declareOverWire(t, p.Addr, client.Queue("profiled").Durable())
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Log())
	}
	for _, path := range []string{cpu, allocs} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // pprof's profiles are gzipped protobuf
			t.Errorf("%s: %d bytes, not a gzipped profile", filepath.Base(path), len(b))
		}
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1024 {
		t.Errorf("run.trace: %d bytes, not an execution trace (starts %q)", len(b), b[:min(len(b), 16)])
	}
}
