package e2ebench

import (
	"fmt"
	"time"
)

// A Schedule is when each publisher is meant to send each of its messages,
// as offsets from the start of a run. Offsets of one publisher ascend.
type Schedule struct {
	// Name labels the case ("rate-1k", "burst-200").
	Name string
	// Rate is the mean intended messages per second over all publishers.
	Rate float64
	// Duration is the time the schedule spans.
	Duration time.Duration
	// Sends holds each publisher's intended send offsets.
	Sends [][]time.Duration
}

// Total is the number of messages in the schedule.
func (s Schedule) Total() int {
	n := 0
	for _, p := range s.Sends {
		n += len(p)
	}
	return n
}

// Steady spreads rate messages per second evenly over d, round robin over
// publishers: message k is meant for k/rate seconds after the start.
func Steady(name string, rate float64, d time.Duration, publishers int) (Schedule, error) {
	if rate <= 0 || d <= 0 || publishers < 1 {
		return Schedule{}, fmt.Errorf("e2ebench: steady schedule needs a positive rate, duration and publisher count")
	}
	total := int(rate * d.Seconds())
	s := Schedule{Name: name, Rate: rate, Duration: d, Sends: make([][]time.Duration, publishers)}
	for k := range total {
		p := k % publishers
		s.Sends[p] = append(s.Sends[p], time.Duration(float64(k)/rate*float64(time.Second)))
	}
	return s, nil
}

// Bursts sends size messages at once every interval over d, each burst
// split as evenly as possible over the publishers.
func Bursts(name string, size int, every, d time.Duration, publishers int) (Schedule, error) {
	if size < 1 || every <= 0 || d < every || publishers < 1 {
		return Schedule{}, fmt.Errorf("e2ebench: burst schedule needs a positive size and interval, a duration of at least one interval and a publisher")
	}
	bursts := int(d / every)
	s := Schedule{Name: name, Rate: float64(size) / every.Seconds(), Duration: time.Duration(bursts) * every,
		Sends: make([][]time.Duration, publishers)}
	for b := range bursts {
		at := time.Duration(b) * every
		for k := range size {
			p := k % publishers
			s.Sends[p] = append(s.Sends[p], at)
		}
	}
	return s, nil
}
