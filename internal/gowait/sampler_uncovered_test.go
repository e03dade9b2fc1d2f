package gowait

import (
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/sampler"
)

// TestLateTickWeights runs the sampler over a fake process of three parked
// goroutines and a late tick: the two that stayed parked unchanged are
// weighted by the whole gap (they waited all of it), the one that ran in
// between by two periods at most, and the rest of its gap is counted as
// uncovered, not lost silently.
func TestLateTickWeights(t *testing.T) {
	s := New(Options{Frequency: 100}) // 10 ms period
	m, info := fakeGo(3)
	s.targets[1] = &targetState{target: newTarget(1, m, info, 0), system: map[int]bool{}}
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	s.SampleOnce(t0)             // first tick: one period each
	s.SampleOnce(t0.Add(ms(15))) // all held: 15 ms each
	// Goroutine 2 runs and parks again at the same place.
	m.find(gBase+0x200+uint64(fakeLayout.G.TrackingSeq), 1)[0]++
	s.SampleOnce(t0.Add(ms(115))) // 100 ms late: 1 and 3 held, 2 capped at 20 ms
	var total time.Duration
	byG := map[bool]time.Duration{} // linked (goroutine 1) or not
	for _, smp := range take(s) {
		total += time.Duration(smp.Value)
		byG[smp.Link != (sampler.Link{})] += time.Duration(smp.Value)
	}
	if want := ms(10 + 15 + 100); byG[true] != want {
		t.Errorf("goroutine 1 (parked throughout) weighs %v, want %v", byG[true], want)
	}
	if want := 3*ms(10+15) + 2*ms(100) + ms(20); total != want {
		t.Errorf("all goroutines weigh %v, want %v", total, want)
	}
	st := s.Stats()
	if st.UncoveredNs != uint64(ms(80)) || st.Held != 2 {
		t.Errorf("UncoveredNs %v, Held %d; want 80ms (goroutine 2's gap beyond two periods) and 2", time.Duration(st.UncoveredNs), st.Held)
	}
}

// TestBacklogCoversItsTime holds the ticks of BacklogTime at any rate
// while the consumer is away (a slow report), and drops, counting them,
// only the ticks beyond: at 199 Hz a fixed backlog of 64 ticks was 0.32 s,
// and the polyglot trace test lost a fifth of a span's wait to one report.
func TestBacklogCoversItsTime(t *testing.T) {
	for _, hz := range []int{19, 199, 997} {
		s := New(Options{Frequency: hz})
		m, info := fakeGo(1)
		s.targets[1] = &targetState{target: newTarget(1, m, info, 0), system: map[int]bool{}}
		t0 := time.Unix(1_700_000_000, 0)
		ticks := int(BacklogTime.Seconds() * float64(hz))
		if ticks < minBacklog {
			ticks = minBacklog
		}
		for i := range ticks {
			s.SampleOnce(t0.Add(time.Duration(i) * s.period))
		}
		if st := s.Stats(); st.DroppedBacklog != 0 {
			t.Errorf("%d Hz: %d records dropped within %d ticks (%v) of no consumer", hz, st.DroppedBacklog, ticks, BacklogTime)
		}
		s.SampleOnce(t0.Add(time.Duration(ticks) * s.period))
		if st := s.Stats(); st.DroppedBacklog != 1 {
			t.Errorf("%d Hz: the tick beyond the backlog: %d records dropped, want 1 counted", hz, st.DroppedBacklog)
		}
		if n := len(take(s)); n != ticks {
			t.Errorf("%d Hz: consumer took %d records, want %d", hz, n, ticks)
		}
	}
}
