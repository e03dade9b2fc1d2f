package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spanprof/spanprof/internal/cli"
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

// Metrics are the agent's self-metrics counted as things happen (reports,
// exports); those read from the pipeline at scrape time are the
// statsCollector's. Both are rows of the metric table (metrics_table.go).
// The zero registry (nil) keeps them unregistered, so tests and embedders
// pay nothing.
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
	buildInfo        *prometheus.GaugeVec
}

// dropReasons are every reason label of spanprof_export_dropped_*_total,
// so each series exists at 0 from the start.
var dropReasons = []string{DropQueueFull, DropRetriesExhausted, DropRejected, DropShutdown, DropEncode}

// NewMetrics creates the metrics and registers them with reg when reg is
// not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		exportRequests:   counterVec("spanprof_export_requests_total"),
		exportDuration:   histogramVec("spanprof_export_duration_seconds", []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}),
		exportedBatches:  counterVec("spanprof_export_batches_total"),
		exportedSamples:  counterVec("spanprof_export_samples_total"),
		rejectedProfiles: counterVec("spanprof_export_rejected_profiles_total"),
		queueLength:      gaugeVec("spanprof_export_queue_length"),
		queueBytes:       gaugeVec("spanprof_export_queue_bytes"),
		droppedBatches:   counterVec("spanprof_export_dropped_batches_total"),
		droppedSamples:   counterVec("spanprof_export_dropped_samples_total"),
		reports:          prometheus.NewCounter(counterOpts("spanprof_reports_total")),
		reportSamples:    prometheus.NewCounter(counterOpts("spanprof_report_samples_total")),
		buildDuration:    prometheus.NewHistogram(histogramOpts("spanprof_report_build_seconds", []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5})),
		reportBytes:      prometheus.NewHistogram(histogramOpts("spanprof_report_bytes", prometheus.ExponentialBuckets(4096, 4, 8))),
		buildInfo:        gaugeVec("spanprof_build_info"),
	}
	b := cli.Info()
	m.buildInfo.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	if reg != nil {
		reg.MustRegister(m.buildInfo, m.exportRequests, m.exportDuration, m.exportedBatches, m.exportedSamples,
			m.rejectedProfiles, m.queueLength, m.queueBytes, m.droppedBatches, m.droppedSamples,
			m.reports, m.reportSamples, m.buildDuration, m.reportBytes)
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
