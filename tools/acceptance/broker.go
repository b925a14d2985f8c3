package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// Broker runs one fibrild on a data directory through its restarts: every
// start after the first listens on the same client address, so clients
// reconnect to it.
type Broker struct {
	// Bin is the fibrild binary (BuildFibrild). Required.
	Bin string
	// DataDir is the storage directory. Required.
	DataDir string
	// Args are extra flags. DefaultArgs are always passed first.
	Args []string
	// Log, when set, receives every line the daemon writes.
	Log io.Writer

	mu   sync.Mutex
	addr string
	proc *fibrildproc.Process
}

// DefaultArgs are passed to every fibrild a Broker starts: no free-space
// watermark (the loop file systems are small) and debug logs (they name
// each stored checkpoint).
var DefaultArgs = []string{"--storage.min_free", "0", "--log.level", "debug"}

// BuildFibrild builds tools/fibrild (pkgDir, relative to the test's
// working directory: "../fibrild" from tools/acceptance) into out.
func BuildFibrild(ctx context.Context, pkgDir, out string) error {
	return fibrildproc.Build(ctx, pkgDir, out, "")
}

func (b *Broker) options() fibrildproc.Options {
	return fibrildproc.Options{Bin: b.Bin, DataDir: b.DataDir, Listen: b.addr,
		Args: append(append([]string(nil), DefaultArgs...), b.Args...), Log: b.Log}
}

// Start starts fibrild and waits until it listens.
func (b *Broker) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc != nil {
		select {
		case <-b.proc.Exited():
		default:
			return fmt.Errorf("acceptance: fibrild %d still running", b.proc.Pid())
		}
	}
	p, err := fibrildproc.Start(ctx, b.options())
	if err != nil {
		return fmt.Errorf("acceptance: start fibrild on %s: %w", b.DataDir, err)
	}
	b.proc, b.addr = p, p.Addr
	return nil
}

// Addr is the client protocol address (fixed after the first Start).
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Admin is the admin API base URL of the running process ("" if none).
func (b *Broker) Admin() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return ""
	}
	return b.proc.Admin
}

// Proc is the current process (nil before the first Start).
func (b *Broker) Proc() *fibrildproc.Process {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.proc
}

// Kill SIGKILLs the running process and reaps it.
func (b *Broker) Kill() {
	if p := b.Proc(); p != nil {
		p.Kill()
	}
}

// Stop sends SIGTERM and waits for a clean exit.
func (b *Broker) Stop(timeout time.Duration) error {
	if p := b.Proc(); p != nil {
		return p.Stop(timeout)
	}
	return nil
}

// StartAndKillAfter starts fibrild and SIGKILLs it after delay, whatever
// it is doing then (recovering, or already listening), and reaps it. It
// reports whether the daemon had logged that it listens.
func (b *Broker) StartAndKillAfter(ctx context.Context, delay time.Duration) (listening bool, err error) {
	o := b.options()
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := append([]string{"--config", "/dev/null", "--storage.data_dir", o.DataDir,
		"--server.listen", listen, "--admin.listen", "127.0.0.1:0"}, o.Args...)
	cmd := exec.CommandContext(ctx, o.Bin, args...)
	var out strings.Builder
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("acceptance: start %s: %w", o.Bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case err := <-exited:
		return false, fmt.Errorf("acceptance: fibrild exited %v before the kill at %v:\n%s", err, delay, out.String())
	case <-t.C:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return strings.Contains(out.String(), "listening proto=fibril"), nil
}

// PartitionInfo is one partition as GET /api/queues/{name} shows it.
type PartitionInfo struct {
	Index       int    `json:"index"`
	WrittenNext uint64 `json:"written_next"`
	DurableNext uint64 `json:"durable_next"`
	// OldestUnsyncedMs is the age of the oldest record not yet synced (0
	// when all are): the durable lag.
	OldestUnsyncedMs int64      `json:"oldest_unsynced_ms"`
	LastSync         *time.Time `json:"last_sync"`
	Latched          bool       `json:"latched"`
	LastError        string     `json:"last_error"`
	Head             uint64     `json:"head"`
	Segments         int        `json:"segments"`
	Messages         int64      `json:"messages"`
	Ready            int64      `json:"ready"`
	InFlight         int64      `json:"in_flight"`
}

// QueueInfo is a queue as GET /api/queues/{name} shows it (the fields the
// acceptance cases use).
type QueueInfo struct {
	Name        string          `json:"name"`
	Durability  string          `json:"durability"`
	Unavailable string          `json:"unavailable"`
	Messages    int64           `json:"messages"`
	Bytes       int64           `json:"bytes"`
	Ready       int64           `json:"ready"`
	InFlight    int64           `json:"in_flight"`
	Consumers   int             `json:"consumers"`
	Partitions  []PartitionInfo `json:"partitions"`
}

// GetQueueInfo reads one queue from the admin API at admin (a base URL).
func GetQueueInfo(ctx context.Context, admin, queue string) (QueueInfo, error) {
	var qi QueueInfo
	if admin == "" {
		return qi, fmt.Errorf("acceptance: queue %s: no admin API (broker down)", queue)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/api/queues/"+url.PathEscape(queue), nil)
	if err != nil {
		return qi, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return qi, fmt.Errorf("acceptance: queue %s info: %w", queue, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return qi, fmt.Errorf("acceptance: queue %s info: %w", queue, err)
	}
	if resp.StatusCode != http.StatusOK {
		return qi, fmt.Errorf("acceptance: queue %s info: %s: %s", queue, resp.Status, body)
	}
	if err := json.Unmarshal(body, &qi); err != nil {
		return qi, fmt.Errorf("acceptance: queue %s info: %w", queue, err)
	}
	return qi, nil
}

// QueueInfo reads one queue from the running broker's admin API.
func (b *Broker) QueueInfo(ctx context.Context, queue string) (QueueInfo, error) {
	return GetQueueInfo(ctx, b.Admin(), queue)
}
