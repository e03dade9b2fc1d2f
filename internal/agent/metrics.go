package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spanprof/spanprof/internal/cli"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/gowait"
)

// Drop reasons of exported batches, the reason label of
// spanprof_export_dropped_*_total.
const (
	DropQueueFull        = "queue_full"        // the queue was full; the oldest batch made room
	DropRetriesExhausted = "retries_exhausted" // retried for retry.max_elapsed
	DropRejected         = "rejected"          // the collector refused it with a non-retryable code
	DropShutdown         = "shutdown"          // still unsent when the shutdown deadline passed
	DropEncode           = "encode"            // the report could not be encoded
)

// Metrics are the agent's self-metrics. The zero registry (nil) keeps them
// unregistered, so tests and embedders pay nothing.
type Metrics struct {
	exportRequests   *prometheus.CounterVec
	exportDuration   *prometheus.HistogramVec
	exportedBatches  *prometheus.CounterVec
	exportedSamples  *prometheus.CounterVec
	rejectedProfiles *prometheus.CounterVec
	queueLength      *prometheus.GaugeVec
	queueBytes       *prometheus.GaugeVec
	droppedBatches   *prometheus.CounterVec
	droppedSamples   *prometheus.CounterVec
	reports          prometheus.Counter
	reportSamples    prometheus.Counter
	buildDuration    prometheus.Histogram
	reportBytes      prometheus.Histogram
	filtered         prometheus.Counter
	buildInfo        *prometheus.GaugeVec
}

// dropReasons are every reason label of spanprof_export_dropped_*_total,
// so each series exists at 0 from the start.
var dropReasons = []string{DropQueueFull, DropRetriesExhausted, DropRejected, DropShutdown, DropEncode}

// NewMetrics creates the metrics and registers them with reg when reg is
// not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		exportRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_requests_total",
			Help: "OTLP export attempts by endpoint and result (success or the gRPC code).",
		}, []string{"endpoint", "result"}),
		exportDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spanprof_export_duration_seconds",
			Help:    "Latency of OTLP export attempts.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"endpoint"}),
		exportedBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_batches_total",
			Help: "Batches the collector accepted.",
		}, []string{"endpoint"}),
		exportedSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_samples_total",
			Help: "Samples (events) in batches the collector accepted.",
		}, []string{"endpoint"}),
		rejectedProfiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_rejected_profiles_total",
			Help: "Profiles the collector reported as rejected in a partial success.",
		}, []string{"endpoint"}),
		queueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spanprof_export_queue_length",
			Help: "Batches waiting to be sent, not counting the one in flight.",
		}, []string{"endpoint"}),
		queueBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spanprof_export_queue_bytes",
			Help: "Encoded size of the batches waiting to be sent, not counting the one in flight.",
		}, []string{"endpoint"}),
		droppedBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_dropped_batches_total",
			Help: "Batches never delivered, by reason (" + strings.Join(dropReasons, ", ") + ").",
		}, []string{"endpoint", "reason"}),
		droppedSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spanprof_export_dropped_samples_total",
			Help: "Samples in batches never delivered, by reason (" + strings.Join(dropReasons, ", ") + ").",
		}, []string{"endpoint", "reason"}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spanprof_reports_total",
			Help: "Profiles built (one per report interval with samples).",
		}),
		reportSamples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spanprof_report_samples_total",
			Help: "Samples put into built profiles.",
		}),
		buildDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spanprof_report_build_seconds",
			Help:    "Time to symbolize and build one profile.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		reportBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spanprof_report_bytes",
			Help:    "Encoded (uncompressed) size of one report, what the queue holds per batch.",
			Buckets: prometheus.ExponentialBuckets(4096, 4, 8),
		}),
		filtered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spanprof_samples_filtered_total",
			Help: "Samples of processes outside the configured executables, discarded by design.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spanprof_build_info",
			Help: "Always 1; the labels name the running build (version, VCS revision, Go version).",
		}, []string{"version", "revision", "goversion"}),
	}
	b := cli.Info()
	m.buildInfo.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	if reg != nil {
		reg.MustRegister(m.buildInfo, m.exportRequests, m.exportDuration, m.exportedBatches, m.exportedSamples,
			m.rejectedProfiles, m.queueLength, m.queueBytes, m.droppedBatches, m.droppedSamples,
			m.reports, m.reportSamples, m.buildDuration, m.reportBytes, m.filtered)
	}
	return m
}

// initEndpoint creates every counter series of endpoint at 0, so an alert
// on "no batch exported for 5 minutes" or "any drop" sees a series from
// the agent's start, not from the first success or drop.
func (m *Metrics) initEndpoint(endpoint string) {
	m.exportRequests.WithLabelValues(endpoint, "success")
	m.exportedBatches.WithLabelValues(endpoint)
	m.exportedSamples.WithLabelValues(endpoint)
	m.rejectedProfiles.WithLabelValues(endpoint)
	m.setQueue(endpoint, 0, 0)
	for _, r := range dropReasons {
		m.droppedBatches.WithLabelValues(endpoint, r)
		m.droppedSamples.WithLabelValues(endpoint, r)
	}
}

func (m *Metrics) setQueue(endpoint string, batches, bytes int) {
	m.queueLength.WithLabelValues(endpoint).Set(float64(batches))
	m.queueBytes.WithLabelValues(endpoint).Set(float64(bytes))
}

func (m *Metrics) drop(endpoint, reason string, samples int) {
	m.droppedBatches.WithLabelValues(endpoint, reason).Inc()
	m.droppedSamples.WithLabelValues(endpoint, reason).Add(float64(samples))
}

// counterCollector exposes cumulative counters read at scrape time: the
// sampler's kernel and user-space counters, and the collector's count.
type counterCollector struct {
	read     func() (map[string]uint64, error)
	taken    *prometheus.Desc
	lost     *prometheus.Desc
	errs     *prometheus.Desc
	exitMaps *prometheus.Desc
	offTaken *prometheus.Desc
	lastRead atomic.Pointer[map[string]uint64]
}

// newCounterCollector reads the counters once to name, in the HELP texts,
// the reasons the sampler actually has.
func newCounterCollector(read func() (map[string]uint64, error)) *counterCollector {
	first, _ := read()
	var lost, errs, exits []string
	for k := range first {
		switch kind, reason := counterKind(k); kind {
		case "lost":
			lost = append(lost, reason)
		case "exit":
			exits = append(exits, reason)
		case "error":
			errs = append(errs, reason)
		}
	}
	list := func(rs []string) string {
		if len(rs) == 0 {
			return ""
		}
		sort.Strings(rs)
		return " (" + strings.Join(rs, ", ") + ")"
	}
	return &counterCollector{
		read: read,
		taken: prometheus.NewDesc("spanprof_samples_taken_total",
			"Samples the eBPF program took.", nil, nil),
		offTaken: prometheus.NewDesc("spanprof_offcpu_samples_taken_total",
			"Off-CPU waits the eBPF program captured.", nil, nil),
		lost: prometheus.NewDesc("spanprof_samples_lost_total",
			"Samples that never reached a profile, by reason"+list(lost)+".", []string{"reason"}, nil),
		errs: prometheus.NewDesc("spanprof_sample_errors_total",
			"Samples kept with a part missing (stack or context read failed), by reason"+list(errs)+".", []string{"reason"}, nil),
		exitMaps: prometheus.NewDesc("spanprof_exit_mappings_missing_total",
			"Mappings of exited processes not captured at their exit, so their samples may keep unnamed frames, by reason"+list(exits)+
				" (exit_maps_missed: whole processes; exit_vmas_dropped: mappings; exit_maps_untracked: processes).", []string{"reason"}, nil),
	}
}

// counterKind sorts a sampler counter into the metric that exports it.
func counterKind(name string) (kind, reason string) {
	switch {
	case name == "samples":
		return "taken", ""
	case name == "offcpu_samples":
		return "offcpu", ""
	case strings.HasPrefix(name, "lost_"):
		return "lost", strings.TrimPrefix(name, "lost_")
	case strings.HasPrefix(name, "exit_"):
		return "exit", name
	}
	return "error", name
}

func (c *counterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.taken
	ch <- c.lost
	ch <- c.errs
	ch <- c.exitMaps
	ch <- c.offTaken
}

func (c *counterCollector) Collect(ch chan<- prometheus.Metric) {
	counters, err := c.read()
	if err != nil && len(counters) == 0 {
		// A closed sampler cannot be read; serve the last values so the
		// counters never go backwards.
		if last := c.lastRead.Load(); last != nil {
			counters = *last
		}
	} else {
		c.lastRead.Store(&counters)
	}
	names := make([]string, 0, len(counters))
	for k := range counters {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := float64(counters[k])
		switch kind, reason := counterKind(k); kind {
		case "taken":
			ch <- prometheus.MustNewConstMetric(c.taken, prometheus.CounterValue, v)
		case "offcpu":
			ch <- prometheus.MustNewConstMetric(c.offTaken, prometheus.CounterValue, v)
		case "lost":
			ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, v, reason)
		case "exit":
			ch <- prometheus.MustNewConstMetric(c.exitMaps, prometheus.CounterValue, v, reason)
		default:
			ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, v, reason)
		}
	}
}

// serveMetrics serves /metrics and /healthz on addr until ctx ends. healthy
// reports whether the agent is running and why not.
func serveMetrics(ctx context.Context, addr string, g prometheus.Gatherer, healthy func() error, log *slog.Logger) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	log.Info("serving metrics", "address", ln.Addr().String())
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// statCounter returns a maker of counters that read one field of a stats
// snapshot, taken from stats at every scrape.
func statCounter[S any](stats func() S) func(name, help string, v func(S) uint64) prometheus.Collector {
	return func(name, help string, v func(S) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(stats())) })
	}
}

// registerCorrelatorStats exposes what the trace-context watcher did.
func registerCorrelatorStats(reg prometheus.Registerer, stats func() correlate.Stats) {
	counter := statCounter(stats)
	reg.MustRegister(
		counter("spanprof_tracectx_scans_total", "Processes inspected for a trace-context source.",
			func(s correlate.Stats) uint64 { return s.Scanned }),
		counter("spanprof_tracectx_configured_total", "Processes whose trace-context source was configured in the kernel.",
			func(s correlate.Stats) uint64 { return s.Configured }),
		counter("spanprof_tracectx_scan_errors_total", "Process inspections that failed.",
			func(s correlate.Stats) uint64 { return s.ScanErrors }),
		counter("spanprof_tracectx_hooks_attached_total", "spanprof_set_trace_context uprobes attached.",
			func(s correlate.Stats) uint64 { return s.HooksAttached }),
		counter("spanprof_tracectx_rescans_unchanged_total", "Rescans (among the inspections) that stopped at the maps, which read as at an inspection that found no source.",
			func(s correlate.Stats) uint64 { return s.Unchanged }),
		counter("spanprof_tracectx_scans_dropped_total", "Inspections not queued: the watcher's queue was full.",
			func(s correlate.Stats) uint64 { return s.ScansDropped }),
		counter("spanprof_tracectx_loaders_attached_total", "Dynamic loader files whose link-map changes (dlopen, dlclose) are watched.",
			func(s correlate.Stats) uint64 { return s.LoadersAttached }),
		counter("spanprof_tracectx_loader_attach_errors_total", "Dynamic loader files whose hook could not be watched: their processes' late library loads are not seen.",
			func(s correlate.Stats) uint64 { return s.LoaderAttachErrors }),
		counter("spanprof_tracectx_link_events_total", "Link-map changes (a library loaded or unloaded) the kernel reported.",
			func(s correlate.Stats) uint64 { return s.LinkEvents }),
		counter("spanprof_tracectx_link_events_early_total", "Link-map changes of processes not inspected yet, left to their first inspection.",
			func(s correlate.Stats) uint64 { return s.LinkEventsEarly }),
		counter("spanprof_tracectx_link_rescans_total", "Inspections (among the scans) asked for by a link-map change, at once or as a retry after it.",
			func(s correlate.Stats) uint64 { return s.LinkRescans }),
		counter("spanprof_tracectx_link_found_total", "Inspections after a link-map change that found a context source or process context not configured before.",
			func(s correlate.Stats) uint64 { return s.LinkFound }),
		counter("spanprof_tracectx_link_rescan_errors_total", "Inspections after a link-map change that failed.",
			func(s correlate.Stats) uint64 { return s.LinkScanErrors }),
		counter("spanprof_tracectx_context_checks_total", "Reads of a known process context's header, to tell an update.",
			func(s correlate.Stats) uint64 { return s.ContextChecks }),
		counter("spanprof_tracectx_context_updates_total", "Process contexts found republished, whose process was inspected again.",
			func(s correlate.Stats) uint64 { return s.ContextUpdates }),
		counter("spanprof_tracectx_context_check_errors_total", "Process-context header reads that failed (the mapping gone): the process was inspected again.",
			func(s correlate.Stats) uint64 { return s.ContextCheckErrors }),
	)
}

// RegisterGoWaitStats exposes what the goroutine-wait sampler saw and
// what it could not attribute, so its losses are visible in agent mode as
// they are in a recording's summary.
func RegisterGoWaitStats(reg prometheus.Registerer, stats func() gowait.Stats) {
	counter := statCounter(stats)
	reg.MustRegister(
		counter("spanprof_go_wait_ticks_total", "Goroutine-wait sampler ticks.",
			func(s gowait.Stats) uint64 { return s.Ticks }),
		counter("spanprof_go_wait_samples_total", "Parked goroutines observed.",
			func(s gowait.Stats) uint64 { return s.Samples }),
		counter("spanprof_go_wait_held_total", "Observations of late ticks weighted by the whole gap (parked unchanged since the previous tick).",
			func(s gowait.Stats) uint64 { return s.Held }),
		counter("spanprof_go_wait_uncovered_ns_total", "Waiting time late ticks could not attribute to goroutines that parked during the gap.",
			func(s gowait.Stats) uint64 { return s.UncoveredNs }),
		counter("spanprof_go_wait_dropped_total", "Parked goroutines read but not sampled: torn, changed while read, unreadable, or labels unreadable.",
			func(s gowait.Stats) uint64 {
				return s.DroppedInvalid + s.DroppedChanged + s.DroppedUnreadable + s.DroppedLabels
			}),
		counter("spanprof_go_wait_tick_errors_total", "Whole-process reads that failed.",
			func(s gowait.Stats) uint64 { return s.TickErrors }),
		counter("spanprof_go_wait_backlog_dropped_total", "Goroutine-wait records of ticks dropped because the consumer had not taken the ticks before (gowait.Backlog of them).",
			func(s gowait.Stats) uint64 { return s.DroppedBacklog }),
	)
}
