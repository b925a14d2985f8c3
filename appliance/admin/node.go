package admin

import (
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// processStart approximates when the process started: package
// initialisation runs before main.
var processStart = time.Now()

// nodeView is GET /api/node: the node's version, disk and process.
type nodeView struct {
	Version      string      `json:"version"`
	StartedAt    time.Time   `json:"started_at"`
	UptimeS      int64       `json:"uptime_s"`
	DataDir      string      `json:"data_dir"`
	Disk         diskView    `json:"disk"`
	Process      processView `json:"process"`
	Queues       int         `json:"queues"`
	FailedQueues int         `json:"failed_queues"`
}

// diskView is the data directory's disk, measured for the request. A
// figure that could not be measured is null, with why in "error".
type diskView struct {
	FreeBytes       *int64 `json:"free_bytes"`  // the process may still use
	TotalBytes      *int64 `json:"total_bytes"` // the file system's size
	UsedByDataBytes *int64 `json:"used_by_data_bytes"`
	BudgetBytes     int64  `json:"budget_bytes"`   // 0: no budget
	MinFreeBytes    int64  `json:"min_free_bytes"` // 0: no watermark
	Refusing        bool   `json:"refusing"`       // publishes get 507 disk_full
	Refusal         string `json:"refusal,omitempty"`
	Error           string `json:"error,omitempty"`
}

type processView struct {
	PID        int      `json:"pid"`
	Goroutines int      `json:"goroutines"`
	RSSBytes   *int64   `json:"rss_bytes,omitempty"`   // Linux only
	HeapBytes  int64    `json:"heap_bytes"`            // live and not yet swept heap objects
	CPUSeconds *float64 `json:"cpu_seconds,omitempty"` // user plus system; Unix only
}

func (s *Server) getNode(r *http.Request) (int, any, error) {
	now := time.Now()
	d := s.b.Disk()
	dv := diskView{BudgetBytes: d.BudgetBytes, MinFreeBytes: d.MinFreeBytes, Refusing: d.Refusal != nil}
	if d.FreeKnown {
		dv.FreeBytes, dv.TotalBytes = &d.FreeBytes, &d.TotalBytes
	}
	if d.UsedKnown {
		dv.UsedByDataBytes = &d.UsedByDataBytes
	}
	if d.Refusal != nil {
		dv.Refusal = d.Refusal.Error()
	}
	if d.Err != nil {
		dv.Error = d.Err.Error()
	}
	return 0, nodeView{
		Version:      s.opts.Version,
		StartedAt:    processStart.UTC(),
		UptimeS:      int64(now.Sub(processStart).Seconds()),
		DataDir:      d.DataDir,
		Disk:         dv,
		Process:      readProcess(),
		Queues:       len(s.b.QueueNames()),
		FailedQueues: len(s.b.QueueErrors()),
	}, nil
}

func readProcess() processView {
	p := processView{PID: os.Getpid(), Goroutines: runtime.NumGoroutine()}
	// runtime/metrics rather than ReadMemStats, which stops the world.
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(heap)
	if heap[0].Value.Kind() == metrics.KindUint64 {
		p.HeapBytes = int64(heap[0].Value.Uint64())
	}
	if rss, ok := residentBytes(); ok {
		p.RSSBytes = &rss
	}
	if cpu, ok := cpuSeconds(); ok {
		p.CPUSeconds = &cpu
	}
	return p
}

// buildVersion is the main module's version from the build information:
// the default of Options.Version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" {
		return "unknown"
	}
	return bi.Main.Version
}
