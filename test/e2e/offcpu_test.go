package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

type offCPUSpan = truth.OffCPUSpan

func readOffCPUTruth(t *testing.T, path string) map[string]offCPUSpan {
	t.Helper()
	spans, err := truth.ReadOffCPU(path)
	if err != nil {
		t.Fatal(err)
	}
	return spans
}

var wantReasons = truth.WantReasons

// recordOffCPU runs the spans fixture under `spanprof record --off-cpu`,
// starting the spans only once spanprof is recording, so every span's
// waits are inside the recording.
func recordOffCPU(t *testing.T, dir string, args ...string) (out, truthPath string) {
	t.Helper()
	truthPath = filepath.Join(dir, "truth")
	out = filepath.Join(dir, "offcpu.otlp.json")
	fix := exec.Command(filepath.Join(repoRoot, "testdata", "offcpu", "build", "spans"), truthPath, "4", "3")
	recordGated(t, fix, append([]string{"--off-cpu", "--duration", "120s", "--output", out}, args...)...)
	return out, truthPath
}

// TestOffCPUPerSpan checks, against the fixture's own measurements, that
// the blocked time spanprof attributes to spans adds up to the real
// blocked time within ±10 % (SPEC), per kind of wait within ±15 %, and that
// the samples carry the state, the wait reason and the waiting function.
// It runs with the default threshold, where the short ping-pong waits and
// most others are sampled and weighted, and with every wait captured.
func TestOffCPUPerSpan(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Fixtures(t, "offcpu", nil)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"sampled", nil},
		{"every wait", []string{"--off-cpu-threshold", "1ns"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, truthPath := recordOffCPU(t, t.TempDir(), tt.args...)
			checkOffCPU(t, readOffCPUTruth(t, truthPath), readOTLP(t, out))
		})
	}
}

func checkOffCPU(t *testing.T, spans map[string]offCPUSpan, samples []otlpSample) {
	t.Helper()
	o := truth.MeasureOffCPU(spans, samples)
	for name, k := range o.Kinds {
		t.Logf("%-9s blocked %8.1f ms, attributed %8.1f ms (%+.1f%%); right reason %.1f%%, waiting function on stack %.1f%%",
			name, float64(k.Truth)/1e6, float64(k.Attributed)/1e6, 100*(float64(k.Attributed)/float64(k.Truth)-1),
			pct64(k.ReasonRight, k.Attributed), pct64(k.FunctionOnStack, k.Attributed))
	}
	rel := o.Error()
	t.Logf("%d spans: blocked %.1f ms, attributed %.1f ms (%+.2f%%) from %d off-CPU events; wrong links %d, state not S %d",
		len(spans), float64(o.Truth)/1e6, float64(o.Attributed)/1e6, 100*rel, o.Events, o.WrongLink, o.WrongState)
	if len(spans) < 100 {
		t.Fatalf("only %d spans ran", len(spans))
	}
	if rel < -0.10 || rel > 0.10 {
		t.Errorf("attributed blocked time is %+.1f%% off the real blocked time, want within ±10%%", 100*rel)
	}
	for name, k := range o.Kinds {
		if r := float64(k.Attributed)/float64(k.Truth) - 1; r < -0.15 || r > 0.15 {
			t.Errorf("%s spans: attributed time %+.1f%% off, want within ±15%%", name, 100*r)
		}
		if pct64(k.ReasonRight, k.Attributed) < 95 {
			t.Errorf("%s spans: %.1f%% of the time has reason %v with it on the stack, want ≥ 95%%", name, pct64(k.ReasonRight, k.Attributed), wantReasons[name])
		}
		if pct64(k.FunctionOnStack, k.Attributed) < 95 {
			t.Errorf("%s spans: waiting function on the stack for %.1f%% of the time, want ≥ 95%%", name, pct64(k.FunctionOnStack, k.Attributed))
		}
	}
	if o.WrongLink > 0 || o.WrongState > 0 {
		t.Errorf("%d off-CPU samples link to no span of their thread, %d are in a state their stack does not explain (S, or D in a mutex or rwsem wait) %v", o.WrongLink, o.WrongState, o.WrongStates)
	}
}

var pct64 = truth.Pct64
