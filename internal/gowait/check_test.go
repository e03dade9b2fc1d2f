package gowait

import (
	"testing"

	"github.com/spanprof/spanprof/internal/profile"
)

// wantReason is the runtime's wait reason for each kind of fixture span.
var wantReason = map[string]string{"sleep": "sleep", "chan": "chan receive", "mutex": "sync.Mutex.Lock"}

// checkAttribution compares linked off-CPU samples with the fixture's
// ground truth: per kind, attributed time within ±20 % of the measured
// waits, and ≥ 95 % of it with the right reason and the span's function
// on the stack; no sample may name a span the fixture did not run.
func checkAttribution(t *testing.T, truth map[profile.Link]spanTruth, samples []profile.Sample) {
	t.Helper()
	type tally struct{ truth, attributed, reasonRight, onStack int64 }
	kinds := map[string]*tally{}
	for _, sp := range truth {
		if kinds[sp.kind] == nil {
			kinds[sp.kind] = &tally{}
		}
		kinds[sp.kind].truth += sp.waited
	}
	var unknown, linked int
	for _, s := range samples {
		if s.Kind != profile.OffCPU || s.Link.IsZero() {
			continue
		}
		linked++
		sp, ok := truth[s.Link]
		if !ok {
			unknown++
			continue
		}
		k := kinds[sp.kind]
		k.attributed += s.Value
		if s.Reason == wantReason[sp.kind] {
			k.reasonRight += s.Value
		}
		for _, f := range s.Frames {
			if f.Function == sp.function {
				k.onStack += s.Value
				break
			}
		}
	}
	if len(truth) < 100 {
		t.Fatalf("only %d spans ran", len(truth))
	}
	for _, name := range []string{"sleep", "chan", "mutex"} {
		k := kinds[name]
		if k == nil {
			t.Errorf("no %s spans ran", name)
			continue
		}
		rel := float64(k.attributed)/float64(k.truth) - 1
		t.Logf("%-5s waited %8.1f ms, attributed %8.1f ms (%+.1f%%); right reason %.1f%%, function on stack %.1f%%",
			name, float64(k.truth)/1e6, float64(k.attributed)/1e6, 100*rel, pct(k.reasonRight, k.attributed), pct(k.onStack, k.attributed))
		if rel < -0.20 || rel > 0.20 {
			t.Errorf("%s spans: attributed %+.1f%% off the measured waits, want within ±20%%", name, 100*rel)
		}
		if pct(k.reasonRight, k.attributed) < 95 {
			t.Errorf("%s spans: reason %q for %.1f%% of the time, want ≥ 95%%", name, wantReason[name], pct(k.reasonRight, k.attributed))
		}
		if pct(k.onStack, k.attributed) < 95 {
			t.Errorf("%s spans: function on the stack for %.1f%% of the time, want ≥ 95%%", name, pct(k.onStack, k.attributed))
		}
	}
	if unknown > 0 {
		t.Errorf("%d of %d linked samples name a span the fixture did not run", unknown, linked)
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
