package sampler

import "time"

// Drain hands every event still queued to handle, in order, until the
// channel is closed — Run closes it once a stopped sampler's ring is
// empty — or timeout passes. It reports whether the channel closed, so a
// caller can say that something may be missing.
func Drain(events <-chan Event, timeout time.Duration, handle func(Event)) bool {
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return true
			}
			handle(e)
		case <-deadline:
			return false
		}
	}
}
