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
