package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressBar draws "label [=====>    ] 42% 1234/5678 (3456/s)" on one
// line of a terminal, at most every 100ms, and a final line on Done. A nil
// *progressBar does nothing, so callers need not check whether one is on.
type progressBar struct {
	w     io.Writer
	label string
	unit  func(int64) string
	start time.Time

	mu   sync.Mutex // guards last
	last time.Time
}

// newProgress returns a bar on stderr when force is set or stderr is a
// terminal, else nil.
func newProgress(stderr io.Writer, force bool, label string, unit func(int64) string) *progressBar {
	if !force {
		f, ok := stderr.(*os.File)
		if !ok || !isTerminal(f) {
			return nil
		}
	}
	if unit == nil {
		unit = func(n int64) string { return fmt.Sprint(n) }
	}
	return &progressBar{w: stderr, label: label, unit: unit, start: time.Now()}
}

// Update redraws the bar for done of total (total 0: unknown).
func (p *progressBar) Update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond && done != total {
		return
	}
	p.last = now
	p.draw(now, done, total)
}

// Done draws the final state and ends the line.
func (p *progressBar) Done(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(time.Now(), done, total)
	fmt.Fprintln(p.w)
}

func (p *progressBar) draw(now time.Time, done, total int64) {
	const width = 30
	rate := ""
	if secs := now.Sub(p.start).Seconds(); secs > 0 {
		rate = fmt.Sprintf(" (%s/s)", p.unit(int64(float64(done)/secs)))
	}
	if total <= 0 {
		fmt.Fprintf(p.w, "\r%s %s%s\033[K", p.label, p.unit(done), rate)
		return
	}
	filled := int(min(done, total) * width / total)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if filled < width {
		bar = bar[:filled] + ">" + bar[filled+1:]
	}
	fmt.Fprintf(p.w, "\r%s [%s] %3d%% %s/%s%s\033[K", p.label, bar, done*100/total, p.unit(done), p.unit(total), rate)
}

// byteUnit prints a byte count in binary units.
func byteUnit(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
