package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/jit"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
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
type Agent struct {
	cfg       Config
	p         *pipeline.Pipeline
	src       pipeline.Source
	log       *slog.Logger
	reg       *prometheus.Registry
	m         *Metrics
	tracker   *proc.Tracker
	collector *collect.Collector
	corr      pipeline.Correlator
	jit       *jit.Maps
	sym       *symbolize.Symbolizer
	exporters []*Exporter
	// unnamedSaid is set once the unnamed frames were reported.
	unnamedSaid bool
	symMode     symbolize.Mode
	// debuginfodSet: debuginfod servers are configured (used or not).
	debuginfodSet bool
	hostName      string
	now           func() time.Time
	execs         map[string]bool
	match         map[uint32]bool // pid → wanted, for the executable filter
	stopping      atomic.Bool
	// retained is how many processes the last report left tracked.
	retained atomic.Int64
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
		cfg:       cfg,
		p:         p,
		src:       p.Source,
		log:       log,
		reg:       opts.Registry,
		m:         NewMetrics(reg),
		tracker:   p.Tracker,
		collector: p.Collector,
		corr:      p.Correlator,
		jit:       p.Symbols.JIT,
		sym:       p.Symbols.Symbolizer,
		symMode:   p.Symbols.Mode,
		// Configured servers, used or not (mode local does not).
		debuginfodSet: len(cfg.Symbolization.debuginfodURLs()) > 0,
		hostName:      host,
		now:           opts.Now,
		match:         map[uint32]bool{},
	}
	if p.Symbols.Mode == symbolize.ModeFull && p.Symbols.Debuginfod == nil {
		log.Warn("symbolization mode full without debuginfod URLs: local debug files only")
	}
	if reg != nil {
		registerSymbols(reg, p.Symbols)
		registerUnwindTables(reg, p.Tables)
		if p.GoWait != nil {
			RegisterGoWaitStats(reg, p.GoWait.Stats)
		}
	}
	if len(cfg.Processes.Executables) > 0 {
		a.execs = map[string]bool{}
		for _, e := range cfg.Processes.Executables {
			a.execs[e] = true
		}
	}
	if reg != nil {
		reg.MustRegister(
			newCounterCollector(p.Source.Counters),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "spanprof_processes_tracked",
				Help: "Processes whose mappings the agent holds.",
			}, func() float64 { return float64(a.tracker.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "spanprof_processes_retained",
				Help: "Processes still tracked after the last report dropped the exited ones: the floor under spanprof_processes_tracked, which climbs between reports with every process that starts.",
			}, func() float64 { return float64(a.retained.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_samples_collected_total",
				Help: "Samples that reached the collector from the sampler.",
			}, func() float64 { return float64(a.collector.Stats().Samples) }),
			attrsDropped("unnamed", func() uint64 { return a.collector.Stats().CtxAttrsUnnamed }),
			attrsDropped("malformed", func() uint64 { return a.collector.Stats().CtxAttrsMalformed }),
			attrsDropped("cardinality", func() uint64 { return a.collector.Stats().CtxAttrsCut }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_user_stacks_cut_total",
				Help: "Samples whose user stack ended at a return address in no code mapping: the frame-pointer chain went through code built without frame pointers, and the rest was not a stack.",
			}, func() float64 { return float64(a.collector.Stats().StacksCut) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_cfi_frames_total",
				Help: "User frames found by their CFA rules (.eh_frame, .debug_frame, Go tables) in the stack window, where the frame-pointer walk skipped or invented callers.",
			}, func() float64 { return float64(a.collector.Stats().UnwindCFIFrames) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_window_cut_total",
				Help: "User stacks cut because a frame lay beyond the stack window the kernel copied; the process's window is widened for the next samples (spanprof_stack_windows_widened_total).",
			}, func() float64 { return float64(a.collector.Stats().UnwindWindowCut) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_below_window_total",
				Help: "User stacks deeper than the stack window that end at frameless code (usually the C library's frames under main or start_thread) below frames the kernel walked beyond the window.",
			}, func() float64 { return float64(a.collector.Stats().UnwindBelowWindow) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_no_info_total",
				Help: "User stacks ending at an address with no unwind rule whose frame pointer the kernel did not walk from: code without .eh_frame or frame pointers.",
			}, func() float64 { return float64(a.collector.Stats().UnwindNoInfo) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_bad_rule_total",
				Help: "User stacks ending at a CFA rule the unwinder cannot evaluate (a DWARF expression, the frame pointer in another register).",
			}, func() float64 { return float64(a.collector.Stats().UnwindBadRule) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_link_frames_total",
				Help: "User frames found by following the frame pointer of JIT code (CPython's perf trampolines, compiled Java methods) off the kernel's frame-pointer chain.",
			}, func() float64 { return float64(a.collector.Stats().UnwindLinkFrames) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_unwind_bad_link_total",
				Help: "User stacks ending at JIT code whose frame pointer was not a frame link (below the stack pointer, misaligned, or its return address into no code).",
			}, func() float64 { return float64(a.collector.Stats().UnwindBadLink) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_stack_windows_widened_total",
				Help: "Times a process's stack window was widened after the window cut one of its stacks.",
			}, func() float64 { return float64(a.collector.Stats().WindowsWidened) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_stack_windows_sized_total",
				Help: "Processes whose stack window was sized from what the walks of their first second of samples needed (copied with the widest window until then).",
			}, func() float64 { return float64(a.collector.Stats().WindowsSized) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_stack_windows_unset_total",
				Help: "Stack window sizes the kernel's map did not take (full): those processes keep the window they had, the widest for a process never sized.",
			}, func() float64 { return float64(a.collector.Stats().WindowsUnset) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_pids_reused_by_fork_total",
				Help: "Pids taken by a new process (its fork event) after the pid's process exited; samples after the fork were symbolized against the new process.",
			}, func() float64 { return float64(a.tracker.Forked()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_pre_exec_samples_total",
				Help: "Samples taken inside an exec, before the new image's registers were set, that were symbolized against the image before the exec (the process as read before it, else its parent's, which a posix_spawn child runs in).",
			}, func() float64 { return float64(a.collector.Stats().PreExecAttributed) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "spanprof_images_missing_total",
				Help: "Stacks whose process image was not there to symbolize them against at the report (never expected: each kept sample holds its image); their user frames stay addresses.",
			}, func() float64 { return float64(a.collector.Stats().ImagesMissing) }),
		)
	}
	if st, ok := p.Correlator.(interface{ Stats() correlate.Stats }); ok && reg != nil {
		registerCorrelatorStats(reg, st.Stats)
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
func (a *Agent) AttachesJVMs() bool { return a.jit.JVMs != nil }

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
	ticker := time.NewTicker(a.cfg.Export.ReportInterval)
	defer ticker.Stop()
	stopJIT := a.jit.Start()
	defer stopJIT()
	events, goWaits := a.src.Events(), a.p.GoroutineWaits()
	for ctx.Err() == nil {
		select {
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			a.handle(e)
		case b := <-goWaits:
			a.p.HandleBatch(b, a.handle)
		case <-ticker.C:
			a.report()
		case <-ctx.Done():
		}
	}
	a.stopping.Store(true)
	a.log.Info("stopping: sending the last profile", "deadline", a.cfg.Export.ShutdownTimeout)
	if !a.p.Drain(10*time.Second, a.handle) {
		a.log.Warn("sampler not drained after 10s; reporting what was read")
	}
	a.report()

	flushCtx, cancel := context.WithTimeout(context.Background(), a.cfg.Export.ShutdownTimeout)
	defer cancel()
	errs := make(chan error, len(a.exporters))
	for _, e := range a.exporters {
		go func() { errs <- e.Shutdown(flushCtx) }()
	}
	var err error
	for range a.exporters {
		err = errors.Join(err, <-errs)
	}
	a.logTotals()
	if err != nil {
		return fmt.Errorf("flush at shutdown: %w", err)
	}
	return nil
}

// handle takes the next event of the stream.
func (a *Agent) handle(e sampler.Event) {
	switch {
	case e.Sample != nil:
		if a.execs != nil && !a.wanted(e.Sample.PID) {
			a.m.filtered.Inc()
			return
		}
	case e.Proc != nil && !e.Proc.LinkMap:
		delete(a.match, e.Proc.PID) // an exec may change the executable
	}
	a.p.Handle(e)
}

// wanted applies the process selection in user space: the kernel filter
// knows only PIDs, so naming executables means sampling everything.
func (a *Agent) wanted(pid uint32) bool {
	if ok, seen := a.match[pid]; seen {
		return ok
	}
	ok := false
	for _, p := range a.cfg.Processes.PIDs {
		if uint32(p) == pid {
			ok = true
		}
	}
	if !ok {
		p := a.tracker.Get(pid)
		ok = a.execs[filepath.Base(p.Exe)] || (p.Exe == "" && a.execs[p.Comm])
	}
	a.match[pid] = ok
	return ok
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
func (a *Agent) report() {
	t0 := time.Now()
	agg := profile.NewAggregator()
	// A JVM whose samples land in JIT code its map does not cover is
	// asked once per report (jit.Maps.Round).
	a.jit.Round()
	prof := a.collector.Emit(a.now(), agg.Add)
	// The report is symbolized: DWARF section data loaded for it goes
	// (the tables built from it stay), and so do the symbol and unwind
	// tables of binaries not seen for a while.
	a.sym.Trim()
	a.collector.Trim()
	a.m.buildDuration.Observe(time.Since(t0).Seconds())
	forget := t0.Add(-exitGrace)
	a.tracker.ForgetExited(forget)
	a.jit.ForgetExited(forget)
	a.retained.Store(int64(a.tracker.Len()))
	if a.corr != nil {
		a.corr.ForgetExited(forget)
	}
	clear(a.match)
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
	args := []any{"samples_collected", a.collector.Stats().Samples}
	if c, err := a.src.Counters(); err == nil {
		var lost uint64
		for k, v := range c {
			if strings.HasPrefix(k, "lost_") {
				lost += v
			}
		}
		args = append(args, "samples_taken", c["samples"], "samples_lost", lost)
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
	if a.unnamedSaid || a.symMode == symbolize.ModeNone {
		return
	}
	u := agg.CountUnnamedFrames()
	if len(u.Objects) == 0 {
		return
	}
	a.unnamedSaid = true
	hint := "set DEBUGINFOD_URLS (or symbolization.debuginfod_urls) to fetch their debug files, or install them"
	switch {
	case a.symMode == symbolize.ModeFull:
		hint = "neither the debug directories nor debuginfod had their debug files"
	case a.debuginfodSet:
		hint = "symbolization mode local does not ask the configured debuginfod servers"
	}
	a.log.Warn("frames left unnamed for want of symbols or debug info (said once)", "binaries", len(u.Objects), "examples", u.String(),
		"functions_named_by_start", u.Functions, "addresses_in_no_function", u.Addresses, "hint", hint)
}

// attrsDropped is the counter of thread-context attributes left out of
// the profile for one reason: unnamed (attributes whose key the process
// context's key map does not name), malformed (samples whose attributes
// did not parse), cardinality (samples past the bound on distinct
// attribute sets per report). The samples keep their trace ids.
func attrsDropped(reason string, f func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "spanprof_context_attributes_dropped_total",
		Help:        "Thread-context attributes (unnamed) or samples' attribute sets (malformed, cardinality) left out of the profile; the samples keep their trace ids.",
		ConstLabels: prometheus.Labels{"reason": reason},
	}, func() float64 { return float64(f()) })
}
