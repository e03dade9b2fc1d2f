package sampler

import (
	"strings"
	"testing"
)

// A ring the programs cannot use is refused before anything is loaded.
func TestRingBytesRefused(t *testing.T) {
	for _, n := range []int{1 << 20, 3 << 20} {
		_, err := New(Options{Frequency: 99, RingBytes: n})
		if err == nil || !strings.Contains(err.Error(), "want a power of two of at least 2 MiB") {
			t.Errorf("RingBytes %d: %v", n, err)
		}
	}
}
