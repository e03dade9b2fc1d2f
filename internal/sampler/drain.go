package sampler

import "time"

// Drain hands every record and event still queued to rec and proc until
// both channels are closed — Run closes them once a stopped sampler's ring
// is empty — or timeout passes. It reports whether the channels closed, so
// a caller can say that something may be missing.
func Drain(records <-chan *Record, procs <-chan ProcEvent, timeout time.Duration, rec func(*Record), proc func(ProcEvent)) bool {
	deadline := time.After(timeout)
	for records != nil || procs != nil {
		select {
		case r, ok := <-records:
			if !ok {
				records = nil
				continue
			}
			rec(r)
		case e, ok := <-procs:
			if !ok {
				procs = nil
				continue
			}
			proc(e)
		case <-deadline:
			return false
		}
	}
	return true
}
