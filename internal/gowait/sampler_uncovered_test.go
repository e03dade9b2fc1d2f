package gowait

import (
	"testing"
	"time"
)

// TestUncoveredTime checks that the time a late tick cannot account for
// (beyond two periods) is counted, not lost silently.
func TestUncoveredTime(t *testing.T) {
	s := New(Options{Frequency: 100})
	t0 := time.Unix(1_700_000_000, 0)
	s.SampleOnce(t0)
	s.SampleOnce(t0.Add(15 * time.Millisecond)) // within the cap
	s.SampleOnce(t0.Add(115 * time.Millisecond))
	if got, want := s.Stats().UncoveredNs, uint64(80*time.Millisecond); got != want {
		t.Errorf("UncoveredNs = %d, want %d (a 100 ms gap at 100 Hz keeps 20 ms)", got, want)
	}
}
