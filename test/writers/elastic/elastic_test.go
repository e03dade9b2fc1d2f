// Package elastic runs a real JVM under the real Elastic APM Java agent
// (universal_profiling_integration_enabled: the agent's JVMTI library,
// loaded after the JVM starts, publishes
// elastic_apm_profiling_correlation_tls_v1) and checks spanprof's links
// against the spans the agent itself reported to the workload
// (test/runtimes/java's SpanWork through the agent's OpenTelemetry
// bridge), under `spanprof record` and `spanprof agent`. Needs root.
package elastic

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/runtimes/java"
	"github.com/spanprof/spanprof/test/truth"
)

// agentJar is the pinned agent (Makefile: writer-elastic-deps).
const agentJar = "elastic-apm-agent-1.55.1.jar"

func TestElasticThreadContext(t *testing.T) {
	bin, build, classes := java.Setup(t)
	root := testutil.RepoRoot()
	jar := filepath.Join(root, "testdata", "elastic", "build", agentJar)
	if _, err := os.Stat(jar); err != nil {
		if _, err := testutil.Make(".", "writer-elastic-deps"); err != nil {
			t.Fatal(err)
		}
	}
	lib := func(a string) string { return filepath.Join(build, "sdk-lib", a+"-1.65.0.jar") }
	for _, mode := range []string{"record", "agent"} {
		t.Run(mode, func(t *testing.T) {
			tmp := t.TempDir()
			sock := filepath.Join(tmp, "sock")
			if err := os.Mkdir(sock, 0o700); err != nil {
				t.Fatal(err)
			}
			// Nothing leaves the machine: no intake (disable_send, and a
			// loopback server_url nobody listens on), no cloud metadata
			// probe, no central config; the agent logs to a file.
			args := []string{"-XX:+PreserveFramePointer", "-javaagent:" + jar,
				"-Delastic.apm.service_name=spanwork-elastic",
				"-Delastic.apm.server_url=http://127.0.0.1:9", "-Delastic.apm.disable_send=true",
				"-Delastic.apm.central_config=false", "-Delastic.apm.cloud_provider=none",
				"-Delastic.apm.metrics_interval=0s", "-Delastic.apm.log_level=info",
				"-Delastic.apm.log_file=" + filepath.Join(tmp, "agent.log"),
				"-Delastic.apm.universal_profiling_integration_enabled=true",
				"-Delastic.apm.universal_profiling_integration_socket_dir=" + sock,
				"-cp", strings.Join([]string{classes, lib("opentelemetry-api"), lib("opentelemetry-context"), lib("opentelemetry-common")}, ":")}
			truthPath := filepath.Join(tmp, "truth")
			const warm, measure = 6, 6
			app := exec.Command(filepath.Join(java.JDKs["17"], "bin", "java"),
				append(args, "SpanWork", "agent", truthPath, "3", fmt.Sprint(warm), fmt.Sprint(measure))...)
			var samples []truth.Sample
			var appErr string
			if mode == "record" {
				out := filepath.Join(tmp, "elastic.otlp.json")
				appErr = java.RunRecorded(t, bin, app, out, warm+measure+60)
				var err error
				if samples, err = truth.ReadOTLP(out); err != nil {
					t.Fatal(err)
				}
			} else {
				samples, _, appErr = java.RunAgent(t, bin, app)
			}
			tr := java.ReadTruth(t, truthPath)
			c := java.Score(samples, tr)
			t.Logf("%s: in-span samples %d, with their span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d",
				mode, c.InSpan, c.InSpanRight, truth.Pct(c.InSpanRight, c.InSpan), c.Linked, c.Wrong,
				truth.Pct(c.Wrong, c.Linked), c.Gap, c.GapLinked)
			if c.InSpan < 500 {
				log, _ := os.ReadFile(filepath.Join(tmp, "agent.log"))
				t.Fatalf("only %d samples inside span windows; app stderr:\n%s\nagent log:\n%s", c.InSpan, appErr, log)
			}
			if p := truth.Pct(c.InSpanRight, c.InSpan); p < 99 {
				t.Errorf("%.3f%% of in-span samples carry their span's ids, want ≥ 99%%", p)
			}
			if p := truth.Pct(c.Wrong, c.Linked); p >= 0.1 {
				t.Errorf("%.3f%% of linked samples are wrong, want < 0.1%%", p)
			}
			if c.Gap < 100 || c.GapLinked > 0 {
				t.Errorf("%d of %d samples outside spans are linked, want 0 (of ≥ 100)", c.GapLinked, c.Gap)
			}
			// Every linked sample names its local root span, the trace's
			// root (the agent's transaction), in transaction.id.
			roots := tr.RootSpans("work.root")
			var linked, rootRight int
			for _, s := range samples {
				if s.Kind != "samples" || s.Trace == "" {
					continue
				}
				want, ok := roots[s.Trace]
				if !ok {
					continue // a trace outside the written-down rounds
				}
				linked += len(s.Times)
				if s.Attrs["transaction.id"] == want {
					rootRight += len(s.Times)
				}
			}
			t.Logf("%s: transaction.id right on %d of %d linked samples", mode, rootRight, linked)
			if linked == 0 || rootRight != linked {
				t.Errorf("transaction.id right on %d of %d linked samples, want all", rootRight, linked)
			}
		})
	}
}
