// Package clock converts kernel timestamps to wall-clock time.
//
// Where the kernel has bpf_ktime_get_tai_ns (Linux 6.1), a sample also
// carries CLOCK_TAI read with its CLOCK_MONOTONIC stamp. TAI is REALTIME
// plus a whole number of seconds (the kernel's TAI offset, 0 unless NTP
// set it), and a step of the wall clock moves both at once: FromTAI gives
// the wall-clock time a sample was taken at even when the clock stepped
// between the sample and its conversion, which the offset below cannot
// know of (a virtual machine's time sync stepping the clock several times
// a second is off by up to a second's worth of steps there).
//
// bpf_ktime_get_ns reads CLOCK_MONOTONIC. Spans are stamped in
// CLOCK_REALTIME, so every kernel time is converted once, where a kernel
// record becomes a sample, with an offset REALTIME − MONOTONIC. The offset
// is measured from several (realtime, monotonic, realtime) brackets and the
// narrowest bracket wins: its midpoint is closest to the instant the
// monotonic clock was read. It is re-measured periodically so that a step
// of the realtime clock (settimeofday, NTP) reaches the conversion: by Run,
// and, whether or not anyone calls Run, lazily by the conversion itself
// once the timestamps it converts are ResyncInterval past the last
// measurement.
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

// ResyncInterval is how far past the last measurement a converted
// timestamp may lie before the conversion re-measures the offset. A
// measurement costs about 50 vDSO clock reads (~1 µs), so once a second
// is free, and a realtime step reaches the timestamps within a second.
const ResyncInterval = time.Second

func now(clk int32) int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(clk, &ts) // cannot fail for these clock ids
	return ts.Nano()
}

// Source reads the clocks in nanoseconds. Tests inject one to step the
// realtime clock without touching the machine's. TAI may be nil: FromTAI
// then takes the TAI offset as 0.
type Source struct {
	Realtime, Monotonic, TAI func() int64
}

// System reads CLOCK_REALTIME, CLOCK_MONOTONIC and CLOCK_TAI.
var System = Source{
	Realtime:  func() int64 { return now(unix.CLOCK_REALTIME) },
	Monotonic: func() int64 { return now(unix.CLOCK_MONOTONIC) },
	TAI:       func() int64 { return now(unix.CLOCK_TAI) },
}

// TAIOffset returns TAI − REALTIME, which the kernel keeps a whole number
// of seconds: the difference of two reads, rounded to the second.
func (src Source) TAIOffset() int64 {
	if src.TAI == nil {
		return 0
	}
	return int64(time.Duration(src.TAI() - src.Realtime()).Round(time.Second))
}

// Measure takes n brackets and returns the offset from the narrowest.
func Measure(n int) Offset { return System.Measure(n) }

// Measure takes n brackets of src and returns the offset from the narrowest.
func (src Source) Measure(n int) Offset {
	if n < 1 {
		n = 1
	}
	best := Offset{Error: time.Duration(1<<63 - 1)}
	for i := 0; i < n; i++ {
		r1 := src.Realtime()
		m := src.Monotonic()
		r2 := src.Realtime()
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
		r := src.Realtime()
		m := src.Monotonic()
		best = Offset{Nanos: r - m, Error: time.Millisecond}
	}
	return best
}

// Converter turns KTime into wall-clock time with an offset that Sync
// refreshes. It is safe for concurrent use.
//
// Conversions re-sync by themselves: when a timestamp lies ResyncInterval
// past the monotonic time of the last measurement, the converting call
// measures again first. So a realtime step reaches the samples within
// about a second even if nobody calls Run. Records already waiting in the
// ring buffer when the clock steps are converted with the new offset (at
// most the reader's poll interval of them).
type Converter struct {
	src    Source
	offset atomic.Int64
	err    atomic.Int64
	// tai is TAI − REALTIME, measured with the offset.
	tai atomic.Int64
	// synced is the monotonic time of the last measurement; 0 before the
	// first, so a zero Converter syncs on its first conversion.
	synced atomic.Int64
	// syncs counts measurements, for tests and metrics.
	syncs atomic.Uint64
}

// NewConverter measures the offset once and returns a converter.
func NewConverter() *Converter { return NewConverterFrom(System) }

// NewConverterFrom returns a converter reading src, measured once.
func NewConverterFrom(src Source) *Converter {
	c := &Converter{src: src}
	c.Sync()
	return c
}

func (c *Converter) source() Source {
	if c.src.Realtime == nil || c.src.Monotonic == nil {
		return System
	}
	return c.src
}

// Sync re-measures the offset and returns it.
func (c *Converter) Sync() Offset {
	src := c.source()
	o := src.Measure(16)
	c.offset.Store(o.Nanos)
	c.err.Store(int64(o.Error))
	c.tai.Store(src.TAIOffset())
	c.synced.Store(src.Monotonic())
	c.syncs.Add(1)
	return o
}

// Syncs returns how many times the offset was measured.
func (c *Converter) Syncs() uint64 { return c.syncs.Load() }

// maybeSync re-measures when t is ResyncInterval past the last measurement.
// Of concurrent callers, one measures; the others keep the current offset.
func (c *Converter) maybeSync(t KTime) {
	last := c.synced.Load()
	if int64(t)-last < int64(ResyncInterval) {
		return
	}
	if c.synced.CompareAndSwap(last, int64(t)) {
		c.Sync()
	}
}

// Offset returns the offset in use.
func (c *Converter) Offset() Offset {
	return Offset{Nanos: c.offset.Load(), Error: time.Duration(c.err.Load())}
}

// UnixNano converts a kernel timestamp to nanoseconds since the Unix epoch.
func (c *Converter) UnixNano(t KTime) int64 {
	c.maybeSync(t)
	return int64(t) + c.offset.Load()
}

// Time converts a kernel timestamp to a time.Time.
func (c *Converter) Time(t KTime) time.Time {
	return time.Unix(0, c.UnixNano(t))
}

// FromTAI converts a CLOCK_TAI timestamp taken at kernel time t to a
// time.Time: exact whatever the wall clock did since, but for a change of
// the TAI offset itself (a leap second, NTP setting it), which reaches it
// as the offset does, within ResyncInterval.
func (c *Converter) FromTAI(t KTime, tai uint64) time.Time {
	c.maybeSync(t)
	return time.Unix(0, int64(tai)-c.tai.Load())
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
