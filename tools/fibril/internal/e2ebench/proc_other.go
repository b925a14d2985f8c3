//go:build !linux

package e2ebench

import (
	"errors"
	"time"
)

// ProcSample is what the kernel has accounted to a process so far.
type ProcSample struct {
	At          time.Time
	CPU         time.Duration
	RSS         int64
	PeakRSS     int64
	CtxSwitches uint64
	WriteBytes  uint64
	OpenFiles   int
}

var errNoProc = errors.New("e2ebench: process accounting needs Linux's /proc")

// SampleProc is only implemented on Linux.
func SampleProc(int) (ProcSample, error) { return ProcSample{}, errNoProc }

// ResetPeakRSS is only implemented on Linux.
func ResetPeakRSS(int) error { return errNoProc }
