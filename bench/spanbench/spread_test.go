package main

import (
	"math"
	"strings"
	"testing"
)

// TestSlowdownPairedByRound checks that a slowdown is taken against the
// baseline of its own round, so a round where the whole machine was slow
// does not read as profiler cost, and that rounds missing a run are left
// out rather than paired with another round.
func TestSlowdownPairedByRound(t *testing.T) {
	row := func(round int, prof string, ms float64) slowRow {
		return slowRow{round: round, prof: prof, chainNs: ms * 1e6}
	}
	b := &bench{slow: []slowRow{
		row(0, "baseline", 1000), row(0, "spanprof", 1010), row(0, "perf record -g", 1040),
		// The machine was twice as slow in this round.
		row(1, "spanprof", 2040), row(1, "baseline", 2000), row(1, "perf record -g", 2080),
		row(2, "baseline", 1000), row(2, "perf record -g", 1100),
		row(3, "spanprof", 5000), // no baseline in this round
	}}
	chain := func(r slowRow) float64 { return r.chainNs }
	tests := []struct {
		name string
		want map[int]float64
	}{
		{"spanprof", map[int]float64{0: 0.01, 1: 0.02}},
		{"perf record -g", map[int]float64{0: 0.04, 1: 0.04, 2: 0.10}},
	}
	for _, tt := range tests {
		got := b.pairedSlowdowns(tt.name, chain)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: slowdowns %v, want %v", tt.name, got, tt.want)
		}
		for round, w := range tt.want {
			if math.Abs(got[round]-w) > 1e-9 {
				t.Errorf("%s round %d: %.4f, want %.4f", tt.name, round, got[round], w)
			}
		}
	}
	ratio, perRound, text := b.slowdownRatio("spanprof", "perf record -g", chain)
	// Medians: spanprof 1.5 %, perf 4 %; per round 0.25 and 0.5.
	if math.Abs(ratio-0.375) > 1e-9 || math.Abs(perRound.lo-0.25) > 1e-9 || math.Abs(perRound.hi-0.5) > 1e-9 {
		t.Fatalf("ratio %.3f, per round %+v", ratio, perRound)
	}
	if !strings.Contains(text, "+1.5 % (+1.0 % … +2.0 %)") {
		t.Errorf("text %q does not show the spanprof spread", text)
	}
	if n := b.noise(chain); !strings.Contains(n, "range of 100.0 %") {
		t.Errorf("noise %q: the baseline went from 1000 to 2000 ms", n)
	}
	if bar := slowdownBar(b); !strings.Contains(bar, "= 0.38; per round") || !strings.HasSuffix(bar, "| met |") {
		t.Errorf("perf slower in every round: want a verdict on 0.38, got\n%s", bar)
	}

	// Once perf is not slower than the baseline in some round, the ratio
	// is noise and the bar says so instead of "met".
	b.slow = append(b.slow, row(4, "baseline", 1000), row(4, "spanprof", 990), row(4, "perf record -g", 980))
	if bar := slowdownBar(b); !strings.Contains(bar, "not resolved") || strings.HasSuffix(bar, "| met |") {
		t.Errorf("perf faster than the baseline in a round: want no verdict, got\n%s", bar)
	}
}

// TestBarWithoutDataIsNotMet checks that a bar whose figures are missing
// (no eBPF runs counted: 0 / 0) reads "no data", not "met".
func TestBarWithoutDataIsNotMet(t *testing.T) {
	b := &bench{slow: []slowRow{{round: 0, prof: "baseline", chainNs: 1e9}}}
	n := 0
	for _, l := range strings.Split(b.ratios(), "\n") {
		if strings.HasPrefix(l, "| eBPF ns per") {
			n++
			if !strings.HasSuffix(l, "| no data |") {
				t.Errorf("bar without figures: %s", l)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no eBPF bars in:\n%s", b.ratios())
	}
}

// slowdownBar is the workload-slowdown line of the quality bars.
func slowdownBar(b *bench) string {
	for _, l := range strings.Split(b.ratios(), "\n") {
		if strings.HasPrefix(l, "| workload slowdown") {
			return l
		}
	}
	return ""
}
