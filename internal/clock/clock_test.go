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
	var m, r unix.Timespec
	for i := 0; i < 100; i++ {
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
		unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		got := m.Nano() + o.Nanos
		// The realtime read came after the monotonic one, so the
		// converted time must be no later than it, and close.
		if d := r.Nano() - got; d < -int64(o.Error) || d > int64(50*time.Microsecond) {
			t.Fatalf("converted monotonic differs from realtime by %d ns", d)
		}
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
