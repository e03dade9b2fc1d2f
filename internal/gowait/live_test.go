package gowait

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/gowait/gowaittest"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/testutil"
)

// serviceFixture builds testdata/gowait/service once per test binary.
func serviceFixture(t testing.TB) string { return gowaittest.Fixture(t) }

// startService runs the fixture with -wait and returns it with the
// writer that starts its spans.
func startService(t testing.TB, args ...string) (*exec.Cmd, io.WriteCloser) {
	return gowaittest.Start(t, args...)
}

func requirePtrace(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "reading another process's memory needs root or CAP_SYS_PTRACE")
}

// spanTruth is one line of the fixture's ground truth.
type spanTruth struct {
	kind, function string
	waited         int64
}

func readTruth(t *testing.T, path string) map[profile.Link]spanTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[profile.Link]spanTruth{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("bad truth line %q", line)
		}
		l := linkOf(map[string]string{"trace_id": f[0], "span_id": f[1]})
		w, _ := strconv.ParseInt(f[3], 10, 64)
		out[profile.Link(l)] = spanTruth{kind: f[2], waited: w, function: f[4]}
	}
	return out
}

// TestSampleService drives the sampler directly against the fixture and
// checks per kind of wait that the time attributed to spans is within
// ±20 % of the measured waits, with the runtime's wait reason and the
// span's function on the stack.
func TestSampleService(t *testing.T) {
	requirePtrace(t)
	truthPath := filepath.Join(t.TempDir(), "truth")
	cmd, stdin := startService(t, "-out", truthPath, "-duration", "6s")
	s := New(Options{})
	if err := s.Add(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	samples := consume(s)
	go func() { s.Run(ctx); close(done) }()
	stdin.Write([]byte("go\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	cancel()
	<-done
	checkAttribution(t, readTruth(t, truthPath), samples())
	if st := s.Stats(); st.DroppedBacklog != 0 {
		t.Errorf("%d records dropped with a consumer taking every tick", st.DroppedBacklog)
	}
	t.Logf("stats %+v", s.Stats())
}

// TestSetSymbolizer checks that the sampler symbolizes with the
// symbolizer it is given (the agent's), not its private one.
func TestSetSymbolizer(t *testing.T) {
	requirePtrace(t)
	cmd, _ := startService(t, "-duration", "10s")
	s := New(Options{})
	sym := symbolize.New(nil, symbolize.Options{})
	s.SetSymbolizer(sym)
	if err := s.Add(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(time.Now())
	if st := s.Stats(); st.Waiting == 0 {
		t.Fatalf("no parked goroutine read: %+v", st)
	}
	if sym.Len() == 0 || sym.Stats().Parsed == 0 {
		t.Errorf("the given symbolizer parsed nothing (%d objects): the sampler used another", sym.Len())
	}
}
