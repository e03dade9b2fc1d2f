package clock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMeasureAgreesWithClocks(t *testing.T) {
	o := Measure(32)
	if o.Error <= 0 || o.Error > time.Millisecond {
		t.Fatalf("bracket width %v, want (0, 1ms]", o.Error)
	}
	t.Logf("offset %d ns, bracket %v", o.Nanos, o.Error)
	// The realtime read comes after the monotonic one, so the converted
	// time must never be later than it (beyond the bracket's width). How
	// much earlier depends on what ran between the two reads: a thread
	// preempted there (a busy machine, a stalled VM) sees a large gap, so
	// the closest of the pairs is judged.
	var m, r unix.Timespec
	closest := int64(1<<63 - 1)
	for i := 0; i < 100; i++ {
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
		unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		d := r.Nano() - (m.Nano() + o.Nanos)
		if d < -int64(o.Error) {
			t.Fatalf("converted monotonic is %d ns later than a realtime read taken after it (bracket %v)", -d, o.Error)
		}
		closest = min(closest, d)
	}
	if closest > int64(50*time.Microsecond) {
		t.Fatalf("converted monotonic differs from realtime by %d ns at best over 100 pairs of reads", closest)
	}
}

func TestConverterUsesSyncedOffset(t *testing.T) {
	c := NewConverter()
	var m unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	got := c.Time(KTime(m.Nano()))
	if d := time.Since(got); d < 0 || d > 10*time.Millisecond {
		t.Fatalf("converted time is %v from now", d)
	}
	c.offset.Store(0)
	c.Sync()
	if c.Offset().Nanos == 0 {
		t.Fatal("Sync did not restore the offset")
	}
}

// TestTAIOffset checks that TAI − REALTIME comes out as the whole seconds
// the kernel keeps, whatever the gap between the two reads, and 0 for a
// source without TAI.
func TestTAIOffset(t *testing.T) {
	real := int64(1_700_000_000_123_456_789)
	for _, c := range []struct {
		tai  int64 // TAI − REALTIME as read, the gap between the reads included
		want int64
	}{
		{37*int64(time.Second) + 800, 37 * int64(time.Second)},
		{37*int64(time.Second) - 800, 37 * int64(time.Second)},
		{800, 0},
		{-800, 0},
		{-2*int64(time.Second) + 800, -2 * int64(time.Second)},
	} {
		src := Source{Realtime: func() int64 { return real }, Monotonic: func() int64 { return 1 },
			TAI: func() int64 { return real + c.tai }}
		if got := src.TAIOffset(); got != c.want {
			t.Errorf("TAI read %d ns from REALTIME: offset %d, want %d", c.tai, got, c.want)
		}
	}
	if got := (Source{Realtime: func() int64 { return real }, Monotonic: func() int64 { return 1 }}).TAIOffset(); got != 0 {
		t.Errorf("no TAI: offset %d, want 0", got)
	}
	// The machine's: its offset is whole seconds and TAI runs with REALTIME.
	off := System.TAIOffset()
	if off%int64(time.Second) != 0 {
		t.Fatalf("system TAI offset %d ns is not whole seconds", off)
	}
	if d := now(unix.CLOCK_TAI) - off - now(unix.CLOCK_REALTIME); d > int64(time.Millisecond) || d < -int64(time.Millisecond) {
		t.Fatalf("CLOCK_TAI − offset is %d ns from CLOCK_REALTIME", d)
	}
}

// TestFromTAIIgnoresMonotonicOffset checks that a TAI stamp converts to
// the wall clock by the TAI offset alone: a wall clock stepped after the
// monotonic offset was measured (here: an offset an hour off) leaves it
// right, where converting the monotonic stamp does not.
func TestFromTAIIgnoresMonotonicOffset(t *testing.T) {
	real := int64(1_700_000_000_000_000_000)
	mono := int64(5_000_000_000)
	src := Source{
		Realtime:  func() int64 { return real + int64(time.Hour) }, // stepped
		Monotonic: func() int64 { return mono },
		TAI:       func() int64 { return real + int64(time.Hour) + 37*int64(time.Second) },
	}
	c := NewConverterFrom(src)
	tai := uint64(real + int64(time.Hour) + 37*int64(time.Second) - 1000)
	if got, want := c.FromTAI(KTime(mono), tai), time.Unix(0, real+int64(time.Hour)-1000); !got.Equal(want) {
		t.Fatalf("FromTAI: %v, want %v", got, want)
	}
}
