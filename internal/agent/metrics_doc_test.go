package agent

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/pipeline"
)

var update = flag.Bool("update", false, "write docs/metrics.md from the metric table")

// metricsDoc is docs/metrics.md, from the test's directory.
var metricsDoc = filepath.Join("..", "..", "docs", "metrics.md")

// renderMetricsDoc writes the metric table as docs/metrics.md.
func renderMetricsDoc() string {
	var b strings.Builder
	b.WriteString(`# The agent's metrics

` + "`spanprof agent`" + ` serves these on ` + "`GET /metrics`" + ` (` + "`metrics_listen`" + `, docs/agent.md),
beside the Go runtime's (` + "`go_*`" + `) and the process's (` + "`process_*`" + `). This file is
generated from the metric table, ` + "`internal/agent/metrics_table.go`" + `:
after changing a row, run

    go test ./internal/agent -run TestMetricsDoc -update

` + "`TestMetricsDoc`" + ` fails when this file differs from the table, and
` + "`TestEveryMetricIsDocumented`" + ` when the agent serves a metric the table
does not have.

Metrics read from the pipeline (one snapshot per scrape,
` + "`pipeline.Stats`" + `) that belong to a part that is off are not served: the
goroutine-wait ones without ` + "`off_cpu`" + ` and a ` + "`go_wait_frequency`" + `, the debuginfod
ones unless debuginfod servers are asked, the trace-context ones without
the watcher. The ` + "`reason`" + ` series of the sampler's counters are those the
running sampler has, named in their HELP text.

| metric | type | labels | meaning |
|---|---|---|---|
`)
	for _, m := range metrics {
		var labels []string
		for _, l := range m.labels {
			labels = append(labels, "`"+l+"`")
		}
		meaning := m.doc
		if meaning == "" {
			meaning = sentencePart(m.help)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.name, m.kind, strings.Join(labels, ", "), meaning)
	}
	return b.String()
}

// sentencePart is a HELP text as the doc's column has it: without its
// full stop, and lowercase unless its first word is an acronym (OTLP).
func sentencePart(help string) string {
	s := strings.TrimSuffix(help, ".")
	if len(s) > 1 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'a' && s[1] <= 'z' {
		s = strings.ToLower(s[:1]) + s[1:]
	}
	return s
}

// TestMetricsDoc: docs/metrics.md is what the metric table says; -update
// writes it.
func TestMetricsDoc(t *testing.T) {
	want := renderMetricsDoc()
	if *update {
		if err := os.WriteFile(metricsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/metrics.md is not what the metric table says: run go test ./internal/agent -run TestMetricsDoc -update")
	}
	seen := map[string]bool{}
	for _, m := range metrics {
		if seen[m.name] {
			t.Errorf("metric %s has two rows", m.name)
		}
		seen[m.name] = true
		if m.help == "" || !strings.HasPrefix(m.name, "spanprof_") {
			t.Errorf("metric %q: want a spanprof_ name and a help text", m.name)
		}
	}
}

// TestEveryMetricIsDocumented: an agent with every part on (goroutine
// waits, a trace-context watcher that counts, debuginfod) serves a metric
// of every row of the table, and no metric of its own without a row, a
// line of docs/metrics.md.
func TestEveryMetricIsDocumented(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	src := newFakeSource()
	src.Counts["offcpu_samples"] = 1
	src.Counts["task_hash_full"] = 0
	cfg := testConfig("127.0.0.1:1")
	cfg.MetricsListen = ""
	cfg.OffCPU = true
	cfg.Symbolization.DebuginfodURLs = []string{"http://127.0.0.1:1"}
	reg := prometheus.NewRegistry()
	p := testPipeline(t, cfg, src, pipeline.Parts{Kernel: noKernel{}, Correlator: &fakeCorrelator{seen: map[uint32]int{}}}, nil)
	a, err := New(cfg, p, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.closeExporters()
	if st := p.Stats(); st.GoWait == nil || st.Debuginfod == nil || st.TraceContext == nil {
		t.Fatalf("a part is off: goroutine waits %v, debuginfod %v, trace context %v", st.GoWait != nil, st.Debuginfod != nil, st.TraceContext != nil)
	}
	// The histograms of endpoints have a series once observed.
	a.m.exportDuration.WithLabelValues("127.0.0.1:1").Observe(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		served[name] = true
		if !slices.ContainsFunc(metrics, func(m metric) bool { return m.name == name }) {
			t.Errorf("metric %s is served but not in the metric table (metrics_table.go)", name)
		}
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("metric %s is not in docs/metrics.md", name)
		}
	}
	for _, m := range metrics {
		if !served[m.name] {
			t.Errorf("metric %s of the table is not served", m.name)
		}
	}
	if len(served) < 60 {
		t.Errorf("only %d metrics served, want the table's %d", len(served), len(metrics))
	}
}
