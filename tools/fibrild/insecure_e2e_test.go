package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInsecureStartWarnsProcess starts a real fibrild whose admin API and
// cluster port listen off loopback with insecure = true, in a network
// namespace of its own (so nothing outside it can reach them), and checks
// that the start logs an INSECURE warning for each before serving.
func TestInsecureStartWarnsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("a network namespace of its own needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare: ", err)
	}
	bin := buildDaemon(t)
	dir := t.TempDir()
	cmd := exec.Command(unshare, "--net", "--", bin, "--storage.data_dir", dir, "--storage.min_free", "0",
		"--server.listen", "0.0.0.0:0", "--server.insecure", "true", "--admin.listen", "0.0.0.0:0", "--admin.insecure", "true",
		"--cluster.listen", "0.0.0.0:0", "--cluster.bootstrap", "true", "--cluster.node_id", "solo", "--cluster.insecure", "true")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		for range lines { // until fibrild has exited and closed its side
		}
		cmd.Wait()
	})
	var log []string
	warned := map[string]bool{}
	deadline := time.After(waitLimit)
	for !warned["client"] || !warned["admin"] || !warned["cluster"] {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fibrild exited before warning; its log:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			switch {
			case strings.Contains(l, "INSECURE: the client port serves off loopback without tokens"):
				warned["client"] = true
			case strings.Contains(l, "INSECURE: the admin API serves off loopback without tokens"):
				warned["admin"] = true
			case strings.Contains(l, "INSECURE: the cluster port serves off loopback without mutual TLS"):
				warned["cluster"] = true
			}
		case <-deadline:
			t.Fatalf("no INSECURE warning for %v within %v; the log:\n%s", warned, waitLimit, strings.Join(log, "\n"))
		}
	}
}
