package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/profile"
)

// AttrHostName is the resource attribute naming the host a process ran on.
const AttrHostName = "host.name"

// Options are the agent's collaborators.
type Options struct {
	Logger *slog.Logger
	// Registry receives the self-metrics; nil keeps them unregistered and
	// serves no /metrics.
	Registry *prometheus.Registry
	// Now defaults to time.Now.
	Now func() time.Time
}

// Agent samples continuously and exports one profile per report interval.
// The pipeline runs the loop (pipeline.Pipeline.Run); the agent's part is
// the report at each tick, the export, and the metrics.
type Agent struct {
	cfg       Config
	p         *pipeline.Pipeline
	log       *slog.Logger
	reg       *prometheus.Registry
	m         *Metrics
	exporters []*Exporter
	// unnamedSaid is set once the unnamed frames were reported.
	unnamedSaid bool
	// debuginfodSet: debuginfod servers are configured (used or not).
	debuginfodSet bool
	hostName      string
	now           func() time.Time
	stopping      atomic.Bool
	// metricsAddr is where /metrics listens once Run started.
	metricsAddr atomic.Pointer[string]
}

// MetricsAddr returns the address /metrics and /healthz are served on,
// empty before Run or when disabled.
func (a *Agent) MetricsAddr() string {
	if p := a.metricsAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// New wires an agent to the pipeline p (built by pipeline.Open or
// pipeline.New from cfg.Pipeline). It dials nothing yet: gRPC connects on
// the first export.
func New(cfg Config, p *pipeline.Pipeline, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	host := cfg.HostName
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("read host name (set host_name): %w", err)
		}
		host = h
	}
	var reg prometheus.Registerer
	if opts.Registry != nil {
		reg = opts.Registry
	}
	a := &Agent{
		cfg: cfg,
		p:   p,
		log: log,
		reg: opts.Registry,
		m:   NewMetrics(reg),
		// Configured servers, used or not (mode local does not).
		debuginfodSet: len(pipeline.DebuginfodURLs(cfg.Symbolization.DebuginfodURLs)) > 0,
		hostName:      host,
		now:           opts.Now,
	}
	if p.Symbolization().Mode == pipeline.ModeFull && !p.Fetches() {
		log.Warn("symbolization mode full without debuginfod URLs: local debug files only")
	}
	if reg != nil {
		// Every metric read from the pipeline, one snapshot per scrape.
		reg.MustRegister(newStatsCollector(p.Stats))
	}
	for _, ep := range cfg.Export.Endpoints {
		e, err := NewExporter(ep, cfg.Export, a.m, log)
		if err != nil {
			a.closeExporters()
			return nil, err
		}
		a.exporters = append(a.exporters, e)
	}
	return a, nil
}

// AttachesJVMs reports whether the agent asks JVMs for their perf maps,
// which needs the capabilities of cmd/spanprof's jvmAttachCapabilities.
func (a *Agent) AttachesJVMs() bool { return a.p.AttachesJVMs() }

func (a *Agent) closeExporters() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing was queued: close at once
	for _, e := range a.exporters {
		_ = e.Shutdown(ctx)
	}
}

// Run consumes samples until ctx ends, sending a profile every report
// interval; then it stops the source, drains it, sends the last profile
// and flushes the queues within the shutdown timeout.
func (a *Agent) Run(ctx context.Context) error {
	if a.reg != nil && a.cfg.MetricsListen != "" {
		addr, stop, err := serveMetrics(ctx, a.cfg.MetricsListen, a.reg, a.healthy, a.log)
		if err != nil {
			a.closeExporters()
			return err
		}
		a.metricsAddr.Store(&addr)
		defer stop()
	}
	a.log.Info("agent started", "frequency", a.cfg.Frequency, "off_cpu", a.cfg.OffCPU, "endpoints", a.cfg.Export.Endpoints,
		"report_interval", a.cfg.Export.ReportInterval, "host", a.hostName)
	// The pipeline's loop, with a report every interval.
	err := a.p.Run(ctx, pipeline.Hooks{
		Every: a.cfg.Export.ReportInterval,
		Tick:  func() bool { a.report(false); return true },
		Stopping: func() {
			a.stopping.Store(true)
			a.log.Info("stopping: sending the last profile", "deadline", a.cfg.Export.ShutdownTimeout)
		},
	})
	if errors.Is(err, pipeline.ErrNotDrained) {
		a.log.Warn("sampler not drained after 10s; reporting what was read")
	}
	a.report(true)

	flushCtx, cancel := context.WithTimeout(context.Background(), a.cfg.Export.ShutdownTimeout)
	defer cancel()
	errs := make(chan error, len(a.exporters))
	for _, e := range a.exporters {
		go func() { errs <- e.Shutdown(flushCtx) }()
	}
	var flushErr error
	for range a.exporters {
		flushErr = errors.Join(flushErr, <-errs)
	}
	a.logTotals()
	if flushErr != nil {
		return fmt.Errorf("flush at shutdown: %w", flushErr)
	}
	return nil
}

// exitGrace is how long an exited process stays known after its exit
// event was handled: the samples of threads that outlive their leader's
// exit event follow it in the stream, read with it or at the reader's
// next poll (200 ms), and a report may come between them. Forgetting at
// a report only the exits handled a grace before it keeps their process
// for them, whatever the report's place in the stream, at the memory of
// a second's exited processes.
const exitGrace = time.Second

// report builds the profile of the interval, hands it to every exporter
// and forgets the processes that exited a grace before it. The samples
// go straight from the collector into the aggregate the export encodes:
// with off-CPU sampling an interval has tens of thousands, and holding
// them as profile samples too would double what a report needs at its
// peak.
//
// Stacks whose binary is beyond the report's parse bound wait for a later
// report (Budget.ParseBytes); the last report (last) takes them all.
func (a *Agent) report(last bool) {
	t0 := time.Now()
	agg := profile.NewAggregator()
	prof := a.p.Emit(a.now(), agg.Add, last)
	a.m.buildDuration.Observe(time.Since(t0).Seconds())
	a.p.ForgetExited(t0.Add(-exitGrace))
	n := agg.Samples()
	if n == 0 {
		a.log.Debug("nothing sampled this interval")
		return
	}
	a.stampHost(prof)
	fin := agg.Finish()
	a.reportUnnamed(fin)
	b, err := newBatch(prof, fin, n)
	if err != nil {
		// Not expected: pdata encodes whatever it holds.
		for _, e := range a.exporters {
			e.drop(DropEncode, n)
		}
		a.log.Error("encode report", "samples", n, "error", err)
		return
	}
	a.m.reports.Inc()
	a.m.reportSamples.Add(float64(n))
	a.m.reportBytes.Observe(float64(b.Size()))
	a.log.Debug("report built", "samples", n, "processes", len(prof.Processes), "bytes", b.Size(), "took", time.Since(t0))
	for _, e := range a.exporters {
		e.Enqueue(b)
	}
}

// stampHost adds host.name to every process's resource attributes.
func (a *Agent) stampHost(p *profile.Profile) {
	for _, pr := range p.Processes {
		if pr.Attributes == nil {
			pr.Attributes = map[string]string{}
		}
		pr.Attributes[AttrHostName] = a.hostName
	}
}

// logTotals says at exit where every sample went.
func (a *Agent) logTotals() {
	st := a.p.Stats()
	args := []any{"samples_collected", st.Collector.Samples}
	if st.CountersErr == nil {
		args = append(args, "samples_taken", st.Counters["samples"], "samples_lost", st.Lost())
	}
	for _, e := range a.exporters {
		st := e.Stats()
		args = append(args, "endpoint", e.Endpoint(), "samples_sent", st.SentSamples, "samples_dropped", st.DroppedSamples)
	}
	a.log.Info("agent stopped", args...)
}

func (a *Agent) healthy() error {
	if a.stopping.Load() {
		return errors.New("stopping")
	}
	return nil
}

// reportUnnamed logs once, at the first report that has them, that
// frames of binaries stayed unnamed for want of symbols or debug info,
// and what would name them.
func (a *Agent) reportUnnamed(agg *profile.Aggregate) {
	mode := a.p.Symbolization().Mode
	if a.unnamedSaid || mode == pipeline.ModeNone {
		return
	}
	u := agg.CountUnnamedFrames()
	if len(u.Objects) == 0 {
		return
	}
	a.unnamedSaid = true
	hint := "set DEBUGINFOD_URLS (or symbolization.debuginfod_urls) to fetch their debug files, or install them"
	switch {
	case mode == pipeline.ModeFull:
		hint = "neither the debug directories nor debuginfod had their debug files"
	case a.debuginfodSet:
		hint = "symbolization mode local does not ask the configured debuginfod servers"
	}
	a.log.Warn("frames left unnamed for want of symbols or debug info (said once)", "binaries", len(u.Objects), "examples", u.String(),
		"functions_named_by_start", u.Functions, "addresses_in_no_function", u.Addresses, "hint", hint)
}
