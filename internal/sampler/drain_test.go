package sampler

import (
	"testing"
	"time"
)

// TestDrain: Drain hands every queued event on in queue order and says
// whether the channel closed.
func TestDrain(t *testing.T) {
	events := make(chan Event, 3)
	events <- Event{Sample: &Record{PID: 1}}
	events <- Event{Proc: &ProcEvent{PID: 3}}
	events <- Event{Sample: &Record{PID: 2}}
	close(events)
	var got []uint32
	if !Drain(events, time.Second, func(e Event) {
		if e.Sample != nil {
			got = append(got, e.Sample.PID)
		} else {
			got = append(got, e.Proc.PID)
		}
	}) {
		t.Fatal("Drain did not see the channel close")
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 2 {
		t.Fatalf("drained %v, want pids 1, 3, 2 in queue order", got)
	}

	open := make(chan Event)
	if Drain(open, 50*time.Millisecond, func(Event) {}) {
		t.Fatal("Drain reported a closed channel for one still open")
	}
}
