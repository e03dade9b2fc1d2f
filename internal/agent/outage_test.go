package agent

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// TestExporterOutageLogBounded: while the collector is down, the outage
// is logged when it starts, again at the bounded rate while it lasts (not
// once then silence, not once per retry), and when it ends.
func TestExporterOutageLogBounded(t *testing.T) {
	addr := freeAddr(t)
	var logs syncBuffer
	m := NewMetrics(prometheus.NewRegistry())
	e, err := NewExporter(addr, fastExport(), m, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownNow(e)
	e.outageLogEvery = 200 * time.Millisecond // before the first batch, which the sender waits for

	start := time.Now()
	e.Enqueue(testBatch(t, 1, 10))
	time.Sleep(1100 * time.Millisecond) // retried every 10-100ms meanwhile
	col := startFakeCollector(t, addr, nil)
	col.waitReceived(t, 1, 10*time.Second)
	down := time.Since(start)
	// The exporter logs the outage's end once the call has returned to
	// it, which is after the collector holds the batch.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(logs.String(), `msg="export succeeded after an outage"`) {
			break
		}
	}

	out := logs.String()
	first := strings.Count(out, `msg="export failed, will retry"`)
	still := strings.Count(out, `msg="export still failing"`)
	recovered := strings.Count(out, `msg="export succeeded after an outage"`)
	attempts := value(t, m.exportRequests.WithLabelValues(addr, "Unavailable"))
	t.Logf("down %v: %v failed attempts, logged 1+%d+%d lines", down.Round(time.Millisecond), attempts, still, recovered)
	// At most one line per 200ms of outage, however many attempts.
	if first != 1 || still < 3 || still > int(down/(200*time.Millisecond)) || recovered != 1 {
		t.Errorf("want 1 start, 3..%d repeats and 1 end line; got %d, %d, %d:\n%s", down/(200*time.Millisecond), first, still, recovered, out)
	}
	if attempts < float64(2*still) {
		t.Errorf("%v attempts for %d repeat lines: the test did not retry often enough to tell", attempts, still)
	}
	if !strings.Contains(out, "failed_attempts=") || !strings.Contains(out, "queued_batches=") {
		t.Errorf("repeat lines lack the counts:\n%s", out)
	}
}

// TestExportSeriesStartAtZero: every export counter series of an endpoint
// exists at 0 before the first success or drop, so alerts on "no exports"
// or "any drop" have a series to evaluate.
func TestExportSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := NewExporter("127.0.0.1:1", fastExport(), m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownNow(e)
	text := gatherText(t, reg)
	want := []string{
		`spanprof_export_batches_total{endpoint="127.0.0.1:1"} 0`,
		`spanprof_export_samples_total{endpoint="127.0.0.1:1"} 0`,
		`spanprof_export_requests_total{endpoint="127.0.0.1:1",result="success"} 0`,
		`spanprof_export_rejected_profiles_total{endpoint="127.0.0.1:1"} 0`,
	}
	for _, r := range dropReasons {
		want = append(want,
			`spanprof_export_dropped_batches_total{endpoint="127.0.0.1:1",reason="`+r+`"} 0`,
			`spanprof_export_dropped_samples_total{endpoint="127.0.0.1:1",reason="`+r+`"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("no series %s", w)
		}
	}
	if !strings.Contains(text, "# HELP spanprof_export_dropped_batches_total Batches never delivered, by reason (queue_full, retries_exhausted, rejected, shutdown, encode).") {
		t.Errorf("HELP does not list the drop reasons")
	}
	if !strings.Contains(text, `spanprof_build_info{goversion="go1.`) {
		t.Errorf("no spanprof_build_info")
	}
}

// TestCounterHelpListsReasons: the HELP texts of the sampler counters
// name the reasons the sampler has, and only those; off-CPU waits taken
// are not an error reason.
func TestCounterHelpListsReasons(t *testing.T) {
	counters := map[string]uint64{"samples": 9, "offcpu_samples": 4, "lost_ringbuf_full": 1, "lost_decode": 0,
		"user_stack_error": 2, "exit_vmas_dropped": 0}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStatsCollector(func() pipeline.Stats { return pipeline.Stats{Counters: counters} }))
	text := gatherText(t, reg)
	for _, w := range []string{
		"# HELP spanprof_samples_lost_total Samples that never reached a profile, by reason (decode, ringbuf_full).",
		"by reason (user_stack_error).",
		`spanprof_samples_lost_total{reason="decode"} 0`,
		"spanprof_offcpu_samples_taken_total 4",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("metrics lack %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, `reason="offcpu_samples"`) {
		t.Errorf("off-CPU samples exported as an error reason")
	}
}

func gatherText(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString("# HELP " + mf.GetName() + " " + mf.GetHelp() + "\n")
		for _, m := range mf.Metric {
			b.WriteString(mf.GetName())
			if len(m.Label) > 0 {
				var ls []string
				for _, l := range m.Label {
					ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
				}
				b.WriteString("{" + strings.Join(ls, ",") + "}")
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			}
			b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}

func shutdownNow(e *Exporter) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = e.Shutdown(ctx)
}
