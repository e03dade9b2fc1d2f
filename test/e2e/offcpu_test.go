package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// offCPUSpan is one span of testdata/offcpu/spans with the time it blocked.
type offCPUSpan struct {
	tid         int
	trace, span string
	kind        string
	blocked     int64
	function    string
}

func readOffCPUTruth(t *testing.T, path string) map[string]offCPUSpan {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]offCPUSpan{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p := strings.Fields(line)
		if len(p) != 8 {
			t.Fatalf("bad truth line %q", line)
		}
		tid, _ := strconv.Atoi(p[0])
		blocked, _ := strconv.ParseInt(p[6], 10, 64)
		out[p[1]+"/"+p[2]] = offCPUSpan{tid, p[1], p[2], p[5], blocked, p[7]}
	}
	return out
}

// wantReasons are the kernel wait functions of each kind of span; the futex
// and pipe ones were renamed across kernel versions (6.18: futex_do_wait,
// anon_pipe_read).
var wantReasons = map[string][]string{
	"sleep":    {"do_nanosleep"},
	"usleep":   {"do_nanosleep"}, // through glibc's usleep, nanosleep, clock_nanosleep
	"futex":    {"futex_wait_queue", "futex_do_wait", "futex_wait_queue_me"},
	"pipe":     {"pipe_read", "anon_pipe_read"},
	"pingpong": {"pipe_read", "anon_pipe_read"},
}

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
	requireRoot(t)
	if out, err := exec.Command("make", "-C", filepath.Join(repoRoot, "testdata", "offcpu")).CombinedOutput(); err != nil {
		t.Fatalf("build offcpu fixtures: %v\n%s", err, out)
	}
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

func checkOffCPU(t *testing.T, truth map[string]offCPUSpan, samples []otlpSample) {
	t.Helper()
	type tally struct {
		truth, attributed            int64
		reasonRight, functionOnStack int64
	}
	kinds := map[string]*tally{}
	for _, s := range truth {
		if kinds[s.kind] == nil {
			kinds[s.kind] = &tally{}
		}
		kinds[s.kind].truth += s.blocked
	}
	var wrongLink, wrongState, events int
	for _, s := range samples {
		if s.kind != "off_cpu" || s.trace == "" {
			continue
		}
		var v int64
		for _, x := range s.values {
			v += x
		}
		events += len(s.values)
		sp, ok := truth[s.trace+"/"+s.span]
		if !ok || strconv.Itoa(sp.tid) != s.attrs["thread.id"] {
			wrongLink++
			continue
		}
		if s.attrs["thread.state"] != "S" {
			wrongState++
		}
		k := kinds[sp.kind]
		k.attributed += v
		for _, r := range wantReasons[sp.kind] {
			if s.attrs["off_cpu.reason"] == r && containsFrame(s.frames, r) {
				k.reasonRight += v
			}
		}
		if containsFrame(s.frames, sp.function) {
			k.functionOnStack += v
		}
	}
	var sumTruth, sumAttr int64
	for name, k := range kinds {
		sumTruth += k.truth
		sumAttr += k.attributed
		t.Logf("%-9s blocked %8.1f ms, attributed %8.1f ms (%+.1f%%); right reason %.1f%%, waiting function on stack %.1f%%",
			name, float64(k.truth)/1e6, float64(k.attributed)/1e6, 100*(float64(k.attributed)/float64(k.truth)-1),
			pct64(k.reasonRight, k.attributed), pct64(k.functionOnStack, k.attributed))
	}
	rel := float64(sumAttr)/float64(sumTruth) - 1
	t.Logf("%d spans: blocked %.1f ms, attributed %.1f ms (%+.2f%%) from %d off-CPU events; wrong links %d, state not S %d",
		len(truth), float64(sumTruth)/1e6, float64(sumAttr)/1e6, 100*rel, events, wrongLink, wrongState)
	if len(truth) < 100 {
		t.Fatalf("only %d spans ran", len(truth))
	}
	if rel < -0.10 || rel > 0.10 {
		t.Errorf("attributed blocked time is %+.1f%% off the real blocked time, want within ±10%%", 100*rel)
	}
	for name, k := range kinds {
		if r := float64(k.attributed)/float64(k.truth) - 1; r < -0.15 || r > 0.15 {
			t.Errorf("%s spans: attributed time %+.1f%% off, want within ±15%%", name, 100*r)
		}
		if pct64(k.reasonRight, k.attributed) < 95 {
			t.Errorf("%s spans: %.1f%% of the time has reason %v with it on the stack, want ≥ 95%%", name, pct64(k.reasonRight, k.attributed), wantReasons[name])
		}
		if pct64(k.functionOnStack, k.attributed) < 95 {
			t.Errorf("%s spans: waiting function on the stack for %.1f%% of the time, want ≥ 95%%", name, pct64(k.functionOnStack, k.attributed))
		}
	}
	if wrongLink > 0 || wrongState > 0 {
		t.Errorf("%d off-CPU samples link to no span of their thread, %d are not in state S", wrongLink, wrongState)
	}
}

func pct64(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
