package sampler

import (
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	records := make(chan *Record, 3)
	procs := make(chan ProcEvent, 2)
	records <- &Record{PID: 1}
	records <- &Record{PID: 2}
	procs <- ProcEvent{PID: 3}
	close(records)
	close(procs)
	var got []uint32
	if !Drain(records, procs, time.Second, func(r *Record) { got = append(got, r.PID) }, func(e ProcEvent) { got = append(got, e.PID) }) {
		t.Fatal("Drain did not see the channels close")
	}
	if len(got) != 3 {
		t.Fatalf("drained %v, want pids 1, 2, 3", got)
	}

	open := make(chan *Record)
	if Drain(open, nil, 50*time.Millisecond, func(*Record) {}, func(ProcEvent) {}) {
		t.Fatal("Drain reported closed channels for one still open")
	}
}
