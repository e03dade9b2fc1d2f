package ddnode

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

// buildSpanprof builds bin/spanprof of this tree into a temporary dir.
func buildSpanprof(t *testing.T) string {
	t.Helper()
	root := testutil.RepoRoot()
	bin := filepath.Join(t.TempDir(), "spanprof")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "spanprof")).CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	return bin
}

// workloadCmd is spanwork.js under Node 24 with the writer on, no agent.
func workloadCmd(t *testing.T, truthPath string, spans, burnMs int) (node string, args, env []string) {
	t.Helper()
	node, _ = filepath.Abs(filepath.Join(build, "node_modules", ".bin", "node"))
	if _, err := os.Stat(node); err != nil {
		t.Skipf("Node 24 not installed (make writer-ddnode-deps): %v", err)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "spanwork.js"))
	dir, _ := filepath.Abs(build)
	env = append(os.Environ(),
		"NODE_PATH="+filepath.Join(dir, "node_modules"),
		"DD_TRACE_OTEL_CTX_ENABLED=true",
		"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
		"DD_INSTRUMENTATION_TELEMETRY_ENABLED=false",
		"DD_REMOTE_CONFIGURATION_ENABLED=false",
		"DD_TRACE_STARTUP_LOGS=false",
		"DD_SERVICE=ddnode-spanwork",
	)
	return node, []string{script, truthPath, strconv.Itoa(spans), strconv.Itoa(burnMs)}, env
}

// judge compares the samples of the workload's main (JS) thread with the
// spans it wrote down: a sample in an on-CPU stretch of a span must carry
// that span's ids; one outside every span, none. Samples of other threads
// (V8 and libuv helpers run no span code) must carry none.
func judge(t *testing.T, samples []truth.Sample, pid int, spans []span) {
	t.Helper()
	const margin = 2_000_000 // clock conversion and the sample's own time
	var in, inRight, out, outLinked, other, otherLinked, waiting int
	first := spans[0].start + spans[0].toUnix
	for _, s := range samples {
		if s.PID != int64(pid) || s.Kind != "samples" {
			continue
		}
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		for _, ts := range s.Times {
			at := int64(ts)
			if tid != pid {
				other++
				if s.Trace != "" {
					otherLinked++
				}
				continue
			}
			var cur *span
			inside := false
			for i := range spans {
				sp := &spans[i]
				if at > sp.start+sp.toUnix-margin && at < sp.end+sp.toUnix+margin {
					inside = true
				}
				for _, c := range sp.cpu {
					if at >= c[0]+sp.toUnix+margin && at <= c[1]+sp.toUnix-margin {
						cur = sp
					}
				}
			}
			switch {
			case cur != nil:
				in++
				if s.Trace == cur.TraceID && s.Span == cur.SpanID {
					inRight++
				} else if in-inRight <= 5 {
					t.Logf("in span %s/%s: sample linked %q/%q", cur.TraceID, cur.SpanID, s.Trace, s.Span)
				}
			case inside:
				waiting++
			case at < first:
			default:
				out++
				if s.Trace != "" {
					outLinked++
					t.Logf("outside spans: sample linked %s/%s", s.Trace, s.Span)
				}
			}
		}
	}
	t.Logf("main thread: %d samples on CPU in spans (%d with the span's ids), %d outside spans (%d linked), %d at a span's wait or edge (not judged); other threads: %d samples (%d linked)",
		in, inRight, out, outLinked, waiting, other, otherLinked)
	// On a loaded machine the workload gets little CPU: 50 samples in
	// spans still let one miss fail the 99 %.
	if in < 50 || out < 10 {
		t.Fatalf("too few samples to judge: %d in spans, %d outside", in, out)
	}
	if float64(inRight) < 0.99*float64(in) {
		t.Errorf("%d of %d in-span samples carry the span's ids (< 99%%)", inRight, in)
	}
	if outLinked != 0 || otherLinked != 0 {
		t.Errorf("%d samples outside spans and %d of other threads carry a link", outLinked, otherLinked)
	}
}

// TestRecordNode: `spanprof record -- node spanwork.js` (the addon is
// loaded late, found through the loader's link-map event) links the
// samples of a real Node 24 under dd-trace by the eBPF walk.
func TestRecordNode(t *testing.T) {
	testutil.RequireRoot(t)
	truthPath := filepath.Join(t.TempDir(), "spans.jsonl")
	node, args, env := workloadCmd(t, truthPath, 20, 60)
	bin := buildSpanprof(t)
	out := filepath.Join(t.TempDir(), "profile.otlp.json")
	rec := exec.Command(bin, append([]string{"record", "--frequency", "499", "--output", out, "--", node}, args...)...)
	rec.Env = env
	var log bytes.Buffer
	rec.Stdout, rec.Stderr = &log, &log
	if err := rec.Run(); err != nil {
		t.Fatalf("spanprof record: %v\n%s", err, log.String())
	}
	t.Logf("spanprof record:\n%s", log.String())
	spans := readTruth(t, truthPath)
	if len(spans) != 20 {
		t.Fatalf("workload wrote %d spans, want 20", len(spans))
	}
	samples, err := truth.ReadOTLP(out)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("spanprof record named no pid")
	}
	pid, _ := strconv.Atoi(m[1])
	judge(t, samples, pid, spans)
}
