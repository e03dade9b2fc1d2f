// Package clock converts kernel CLOCK_MONOTONIC timestamps to wall-clock
// time.
//
// bpf_ktime_get_ns reads CLOCK_MONOTONIC. Spans are stamped in
// CLOCK_REALTIME, so every kernel time is converted once, where a kernel
// record becomes a sample, with an offset REALTIME − MONOTONIC. The offset
// is measured from several (realtime, monotonic, realtime) brackets and the
// narrowest bracket wins: its midpoint is closest to the instant the
// monotonic clock was read. It is re-measured periodically so that a step
// of the realtime clock (settimeofday, NTP) reaches the conversion.
package clock

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// KTime is a kernel CLOCK_MONOTONIC timestamp in nanoseconds.
type KTime uint64

// Offset is REALTIME − MONOTONIC in nanoseconds, with the width of the
// bracket it was measured from (an upper bound on its error).
type Offset struct {
	Nanos int64
	Error time.Duration
}

func now(clk int32) int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(clk, &ts) // cannot fail for these clock ids
	return ts.Nano()
}

// Measure takes n brackets and returns the offset from the narrowest.
func Measure(n int) Offset {
	if n < 1 {
		n = 1
	}
	best := Offset{Error: time.Duration(1<<63 - 1)}
	for i := 0; i < n; i++ {
		r1 := now(unix.CLOCK_REALTIME)
		m := now(unix.CLOCK_MONOTONIC)
		r2 := now(unix.CLOCK_REALTIME)
		width := time.Duration(r2 - r1)
		if width < 0 {
			// The realtime clock stepped back inside the bracket; useless.
			continue
		}
		if width < best.Error {
			best = Offset{Nanos: r1 + (r2-r1)/2 - m, Error: width}
		}
	}
	if best.Error == time.Duration(1<<63-1) {
		r := now(unix.CLOCK_REALTIME)
		m := now(unix.CLOCK_MONOTONIC)
		best = Offset{Nanos: r - m, Error: time.Millisecond}
	}
	return best
}

// Converter turns KTime into wall-clock time with an offset that Sync
// refreshes. It is safe for concurrent use.
type Converter struct {
	offset atomic.Int64
	err    atomic.Int64
}

// NewConverter measures the offset once and returns a converter.
func NewConverter() *Converter {
	c := &Converter{}
	c.Sync()
	return c
}

// Sync re-measures the offset and returns it.
func (c *Converter) Sync() Offset {
	o := Measure(16)
	c.offset.Store(o.Nanos)
	c.err.Store(int64(o.Error))
	return o
}

// Offset returns the offset in use.
func (c *Converter) Offset() Offset {
	return Offset{Nanos: c.offset.Load(), Error: time.Duration(c.err.Load())}
}

// UnixNano converts a kernel timestamp to nanoseconds since the Unix epoch.
func (c *Converter) UnixNano(t KTime) int64 {
	return int64(t) + c.offset.Load()
}

// Time converts a kernel timestamp to a time.Time.
func (c *Converter) Time(t KTime) time.Time {
	return time.Unix(0, c.UnixNano(t))
}

// Run re-syncs every interval until stop is closed.
func (c *Converter) Run(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.Sync()
		}
	}
}
