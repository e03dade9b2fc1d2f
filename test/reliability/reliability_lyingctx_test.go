package reliability

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestReliabilityLyingThreadContext profiles a process whose OTel thread
// context record lies (not valid, zero trace id, unmapped pointer,
// attrs_data_size beyond the 612-byte bound, an unknown valid value):
// only the honest phase's samples may carry a span.
func TestReliabilityLyingThreadContext(t *testing.T) {
	testutil.RequireRoot(t)
	liar := exec.Command(filepath.Join(fixtures, "liar"), "30")
	stdout, _ := liar.StdoutPipe()
	if err := liar.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { liar.Process.Kill(); liar.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("liar did not start: %q %v", line, err)
	}
	out := filepath.Join(t.TempDir(), "liar.pb.gz")
	rec := startSpanprof(t, "recording", "record", "--pid", fmt.Sprint(liar.Process.Pid),
		"--frequency", "999", "--duration", "4s", "--output", out)
	rec.wait(t)

	p := readPprof(t, out)
	type tally struct{ samples, linked int64 }
	phases := map[string]*tally{}
	traces := map[string]map[string]int64{}
	for _, s := range p.Sample {
		phase := ""
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if strings.HasPrefix(ln.Function.Name, "liar_phase_") {
					phase = strings.TrimPrefix(ln.Function.Name, "liar_phase_")
				}
			}
		}
		if phase == "" {
			continue
		}
		if phases[phase] == nil {
			phases[phase] = &tally{}
			traces[phase] = map[string]int64{}
		}
		phases[phase].samples += s.Value[0]
		if tr := label(s, "trace_id"); tr != "" {
			phases[phase].linked += s.Value[0]
			traces[phase][tr] += s.Value[0]
		}
	}
	for name, tl := range phases {
		t.Logf("phase %-9s samples %4d linked %4d traces %v", name, tl.samples, tl.linked, traces[name])
	}
	good := phases["good"]
	if good == nil || good.samples < 20 {
		t.Fatalf("too few samples of the honest phase to judge: %+v\n%s", good, rec.stderr)
	}
	// The control: the honest record is read (SPEC: >= 99.5 % linked).
	if pct(good.linked, good.samples) < 95 || len(traces["good"]) != 1 || traces["good"][strings.Repeat("11", 16)] != good.linked {
		t.Errorf("honest phase: %d of %d linked, traces %v", good.linked, good.samples, traces["good"])
	}
	for _, name := range []string{"invalid", "zero", "unmapped", "badvalid"} {
		if tl := phases[name]; tl != nil && tl.linked > 0 {
			t.Errorf("phase %s: %d samples linked to %v, want none", name, tl.linked, traces[name])
		}
	}
	// attrs_data_size 0xffff > 612: no conforming writer made the record,
	// so its ids are not trusted (tracectx.ReadRecord and the eBPF
	// program apply the same OTEP 4947 bound).
	if tl := phases["lying"]; tl != nil && tl.linked > 0 {
		t.Errorf("phase lying (attrs_data_size 0xffff): %d of %d samples linked, want none", tl.linked, tl.samples)
	}
}
