package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// goWaitSpan is one line of testdata/gowait/service's ground truth.
type goWaitSpan struct {
	kind, function string
	waited         int64
}

// goWaitReasons are the runtime's wait reasons of each kind of span.
var goWaitReasons = map[string]string{"sleep": "sleep", "chan": "chan receive", "mutex": "sync.Mutex.Lock"}

// TestGoWaitPerSpan runs `spanprof record --off-cpu` against a Go service
// whose spans park their goroutines (time.Sleep, a channel receive, a
// contended sync.Mutex) — waits that no thread blocks for, so only the
// goroutine sampler sees them — and checks against the service's own
// measurements: time attributed per kind of span within ±20 %, with the
// runtime's wait reason and the span's function on the stack, no sample
// linked to a span that did not run, and the idle goroutines outside any
// span present, unlinked.
func TestGoWaitPerSpan(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	svc := filepath.Join(dir, "service")
	build := exec.Command("go", "build", "-o", svc, ".")
	build.Dir = filepath.Join(repoRoot, "testdata", "gowait", "service")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gowait service: %v\n%s", err, out)
	}
	truthPath, out := filepath.Join(dir, "truth"), filepath.Join(dir, "gowait.otlp.json")
	fix := exec.Command(svc, "-wait", "-duration", "8s", "-idle", "50", "-out", truthPath)
	log := recordGated(t, fix, "--off-cpu", "--duration", "120s", "--output", out)
	t.Logf("spanprof: %s", log)
	checkGoWait(t, readGoWaitTruth(t, truthPath), readOTLP(t, out))
}

func readGoWaitTruth(t *testing.T, path string) map[string]goWaitSpan {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]goWaitSpan{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("bad truth line %q", line)
		}
		w, _ := strconv.ParseInt(f[3], 10, 64)
		out[f[0]+"/"+f[1]] = goWaitSpan{kind: f[2], waited: w, function: f[4]}
	}
	return out
}

func checkGoWait(t *testing.T, truth map[string]goWaitSpan, samples []otlpSample) {
	t.Helper()
	type tally struct{ truth, attributed, reasonRight, onStack int64 }
	kinds := map[string]*tally{}
	for _, sp := range truth {
		if kinds[sp.kind] == nil {
			kinds[sp.kind] = &tally{}
		}
		kinds[sp.kind].truth += sp.waited
	}
	var unknown, notS int
	var idle int64
	for _, s := range samples {
		if s.Kind != "off_cpu" {
			continue
		}
		var v int64
		for _, x := range s.Values {
			v += x
		}
		if s.Trace == "" {
			if s.Attrs["off_cpu.reason"] == "chan receive" && containsFrame(s.Frames, "main.main.func1") {
				idle += v
			}
			continue
		}
		sp, ok := truth[s.Trace+"/"+s.Span]
		if !ok {
			unknown++
			continue
		}
		if s.Attrs["thread.state"] != "S" {
			notS++
		}
		k := kinds[sp.kind]
		k.attributed += v
		if s.Attrs["off_cpu.reason"] == goWaitReasons[sp.kind] {
			k.reasonRight += v
		}
		if containsFrame(s.Frames, sp.function) {
			k.onStack += v
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
		t.Logf("%-5s waited %8.1f ms, attributed %8.1f ms (%+.1f%%); reason %q %.1f%%, span function on stack %.1f%%",
			name, float64(k.truth)/1e6, float64(k.attributed)/1e6, 100*rel,
			goWaitReasons[name], pct64(k.reasonRight, k.attributed), pct64(k.onStack, k.attributed))
		if rel < -0.20 || rel > 0.20 {
			t.Errorf("%s spans: attributed %+.1f%% off the measured waits, want within ±20%%", name, 100*rel)
		}
		if pct64(k.reasonRight, k.attributed) < 95 {
			t.Errorf("%s spans: reason %q for %.1f%% of the time, want ≥ 95%%", name, goWaitReasons[name], pct64(k.reasonRight, k.attributed))
		}
		if pct64(k.onStack, k.attributed) < 95 {
			t.Errorf("%s spans: span function on the stack for %.1f%% of the time, want ≥ 95%%", name, pct64(k.onStack, k.attributed))
		}
	}
	t.Logf("%d spans; idle goroutines outside spans: %.1f s waiting", len(truth), float64(idle)/1e9)
	if unknown > 0 || notS > 0 {
		t.Errorf("%d off-CPU samples link to a span that did not run, %d are not in state S", unknown, notS)
	}
	if idle == 0 {
		t.Errorf("no unlinked samples of the idle goroutines (chan receive in main.main.func1)")
	}
}
