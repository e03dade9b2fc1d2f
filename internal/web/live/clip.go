package live

import (
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// clockSlack widens an exported span's window when samples are matched
// against it: span times come from the SDK's clock, sample times from the
// kernel's converted to wall time, which agree within tens of
// microseconds on one host.
const clockSlack = time.Millisecond

// spanWindow is the time an exported span ran, as its export says; the
// zero window (a span no export carried) takes every sample.
type spanWindow struct{ start, end time.Time }

func windowOf(sp Span) spanWindow {
	if sp.Start.IsZero() || sp.End.Before(sp.Start) {
		return spanWindow{}
	}
	return spanWindow{sp.Start.Add(-clockSlack), sp.End.Add(clockSlack)}
}

// split divides a sample's weight (ns) into the part inside the span's
// window and the part outside. A sample carries its span's ids because the
// thread or goroutine held them when it was taken; one outside the span's
// own time is a goroutine that inherited the span's labels and outlived
// it (a connection's reader started inside the span serves later
// requests), so its weight is not the span's. It is counted apart, not
// dropped.
//
// An on-CPU tick and the waits of parked goroutines (thread id 0: the
// goroutine sampler observes them at Time, weighting each by its tick) are
// instants; a thread's off-CPU event is the interval of Value ns before
// Time, and only its overlap with the window is inside.
func (w spanWindow) split(smp *profile.Sample, period int64) (inside, outside int64) {
	v := smp.Value
	if smp.Kind != profile.OffCPU {
		v *= period
	}
	if w.start.IsZero() || smp.Time.IsZero() {
		return v, 0
	}
	if smp.Kind != profile.OffCPU || smp.TID == 0 {
		if smp.Time.Before(w.start) || smp.Time.After(w.end) {
			return 0, v
		}
		return v, 0
	}
	from, to := smp.Time.Add(-time.Duration(v)), smp.Time
	if from.Before(w.start) {
		from = w.start
	}
	if to.After(w.end) {
		to = w.end
	}
	if !to.After(from) {
		return 0, v
	}
	inside = min(to.Sub(from).Nanoseconds(), v)
	return inside, v - inside
}
