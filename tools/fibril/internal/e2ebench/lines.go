package e2ebench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Footprint is one system's resource figures: a JSON line of kind
// "footprint". Figures that could not be measured are negative.
type Footprint struct {
	Kind        string  `json:"kind"` // "footprint"
	System      string  `json:"system"`
	Process     string  `json:"process"` // what was measured, e.g. "fibrild", "nats-server (always-sync)"
	BinaryBytes int64   `json:"binary_bytes"`
	IdleRSS     int64   `json:"idle_rss_bytes"`
	IdleWakeups float64 `json:"idle_wakeups_per_sec"`
	IdleSyncs   float64 `json:"idle_syncs_per_sec"`
	IdleWrites  float64 `json:"idle_write_bytes_per_sec"`
	// StartupSeconds is the time from exec to accepting clients with
	// StartupBytes of messages stored (for fibrild, in one active segment).
	StartupSeconds float64 `json:"startup_seconds"`
	StartupBytes   int64   `json:"startup_bytes"`
	// Queues empty buffered queues declared on a fresh fibrild, and what
	// each costs it once idle: disk (allocated blocks) and open files per
	// queue, and the process's RSS with all of them (0: not measured).
	Queues         int     `json:"queues,omitempty"`
	QueueDiskBytes int64   `json:"queue_disk_bytes,omitempty"`
	QueueOpenFiles float64 `json:"queue_open_files,omitempty"`
	QueuesRSS      int64   `json:"queues_rss_bytes,omitempty"`
	Env            Env     `json:"env"`
}

// Results is a bench's output: its run and footprint lines.
type Results struct {
	Runs       []Result
	Footprints []Footprint
}

// ReadResults reads JSON lines as written by the bench; lines of other
// kinds are skipped.
func ReadResults(r io.Reader) (*Results, error) {
	res := &Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var kind struct{ Kind string }
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			return nil, fmt.Errorf("e2ebench: line %d: %w", n, err)
		}
		var err error
		switch kind.Kind {
		case "run":
			var v Result
			err = json.Unmarshal(sc.Bytes(), &v)
			res.Runs = append(res.Runs, v)
		case "footprint":
			var v Footprint
			err = json.Unmarshal(sc.Bytes(), &v)
			res.Footprints = append(res.Footprints, v)
		}
		if err != nil {
			return nil, fmt.Errorf("e2ebench: line %d: %w", n, err)
		}
	}
	return res, sc.Err()
}
