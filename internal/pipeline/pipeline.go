// Package pipeline builds the one way a sample takes in user space, for
// every command that samples (record, agent): the process tracker, the
// symbolization (debug files, debuginfod, JIT perf maps), the collector,
// the trace-context watcher and the goroutine-wait sampler. They share
// one tracker, one symbolizer, one set of unwind tables and one memory
// budget, so that what one command fixes or bounds the other has too.
//
// Two producers feed the one consumer: the kernel's ordered stream
// (Source.Events) and the goroutine-wait sampler's ticks. The consumer is
// the pipeline's own loop (Run), which hands both to Handle, so every
// sample is symbolized, described and exported by the collector alike;
// a command adds what differs through Hooks (when to stop, a report or a
// progress line at each tick) and reads one snapshot of every stage's
// counters (Stats).
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/internal/unwind"
)

// Source is what the pipeline needs of a sampler (*sampler.Sampler);
// tests feed events through a fake.
type Source interface {
	// Events delivers samples and process events in ring order; the
	// pipeline is its one consumer (Handle).
	Events() <-chan sampler.Event
	Counters() (map[string]uint64, error)
	// Stop detaches the programs; the channel still delivers what the
	// kernel had written, then closes.
	Stop()
}

// Correlator keeps each process's trace-context reading configured in the
// kernel and knows what the process published for its resource
// (*correlate.Watcher).
type Correlator interface {
	Seen(pid uint32, rescan time.Duration)
	Exec(pid uint32)
	// LinkMap: the process's dynamic loader changed its link map (a
	// library loaded or unloaded).
	LinkMap(pid uint32)
	Exit(pid uint32)
	Info(pid uint32) (correlate.Info, bool)
	// ForgetExited drops what the processes whose exit was handled before
	// before published, after a report.
	ForgetExited(before time.Time)
}

// RescanAfter is how long a process without a known context source waits
// before it is inspected again, in its first seconds (a library may have
// been loaded since; later loads come as link-map events where the
// loader's hook is watched).
const RescanAfter = 2 * time.Second

// Config is what a command tells its pipeline.
type Config struct {
	// Frequency is the on-CPU sampling frequency in Hz per CPU.
	Frequency int
	// PIDs are the processes named; empty means every process. They are
	// inspected for trace context before the first sample and, with
	// GoWaitFrequency, their goroutines sampled.
	PIDs []int
	// Executables, when named, select processes in user space by their
	// executable's base name (or, failing that, their command name) beside
	// PIDs: the kernel then samples every process, since it knows only
	// pids, and the pipeline drops the samples of the others (counted,
	// Stats.Filtered).
	Executables []string
	OffCPU      OffCPUOptions
	// GoWaitFrequency samples parked goroutines of Go processes, with
	// OffCPU on; 0 turns it off.
	GoWaitFrequency int
	Symbolization   Symbolization
	Budget          Budget
	Logger          *slog.Logger
}

// Parts are collaborators New takes instead of building its own.
type Parts struct {
	// Tracker defaults to one on /proc, closed by Close.
	Tracker *proc.Tracker
	// Kernel defaults to /proc/kallsyms.
	Kernel collect.KernelSymbols
	// Correlator is nil when trace context is not read.
	Correlator Correlator
	// ProcRoot is where the default tracker and the JIT perf maps read
	// the processes ("/proc" when empty), and ReadMemory reads the code
	// of their JIT regions (/proc/PID/mem when nil): a replay
	// (test/replay) gives recorded ones.
	ProcRoot   string
	ReadMemory collect.MemoryReader
	// PACMask is the pointer-authentication bits of arm64 return
	// addresses, cleared from those the unwinder reads in the stack
	// window (the sampler's, which clears them from the kernel's chain).
	PACMask uint64
}

// Pipeline is one tracker, symbolization, collector, trace-context
// watcher and goroutine-wait sampler over one source. Its parts are its
// own: a command runs it (Run), reads its counters (Stats) and takes its
// profiles (Emit, Build).
type Pipeline struct {
	source     Source
	tracker    *proc.Tracker
	correlator Correlator // nil when trace context is not read
	symbols    *Symbols
	// tables are the unwind tables of the leaf fixer and the cgo
	// callback unwinder, bounded by the budget's UnwindBytes.
	tables    *unwind.Cache
	collector *collect.Collector
	// goWait samples parked goroutines; nil when off.
	goWait *gowait.Sampler

	cfg Config
	log *slog.Logger
	// Set by Open: the kernel side it loaded, which Start starts.
	sampler *sampler.Sampler
	watch   *correlate.Watcher
	closers []func()
	// goWaitDone is closed when the goroutine-wait sampler stopped.
	goWaitDone chan struct{}
	stopGoWait context.CancelFunc
	// The executable filter (Config.Executables): nil when off; match
	// caches its answer per pid until the pid's next process event or
	// the next ForgetExited. Both belong to the loop's goroutine.
	execs map[string]bool
	match map[uint32]bool
	// handled and filtered count the samples Handle took and dropped;
	// retained is how many processes the last ForgetExited left tracked.
	handled, filtered atomic.Uint64
	retained          atomic.Int64
}

// Open loads the sampler programs and builds the pipeline on them; Start
// attaches them.
func Open(cfg Config) (*Pipeline, error) {
	log := logger(cfg.Logger)
	tracker := proc.NewTracker("/proc", log)
	pids := cfg.PIDs
	if len(cfg.Executables) > 0 {
		pids = nil // selected in user space (wanted)
	}
	s, err := sampler.New(sampler.Options{
		Frequency: cfg.Frequency, PIDs: pids, Logger: log,
		OffCPU:    cfg.OffCPU,
		RingBytes: cfg.Budget.RingMiB << 20,
		// The reader reads an exec'd image as it decodes the exec: a
		// short-lived process is gone by the time the consumer reaches
		// the event, which carries the read to it.
		Exec: execReader{tracker},
		// The collector sizes each process's window from its first
		// samples, copied with the widest.
		NewProcessWindow: newProcessWindow(),
	})
	if err != nil {
		tracker.Close()
		return nil, err
	}
	watch := correlate.New(s, correlate.GoLabels(), log)
	// The scan of a new process takes the tracker's read of it.
	watch.ShareReads(tracker)
	p, err := New(cfg, s, Parts{Tracker: tracker, Correlator: watch, PACMask: s.PACMask()})
	if err != nil {
		s.Close()
		tracker.Close()
		return nil, err
	}
	p.sampler, p.watch = s, watch
	p.closers = append(p.closers, func() { s.Close() }, tracker.Close)
	return p, nil
}

// newProcessWindow is the stack window the kernel copies for a process
// the collector has not sized one for yet: the widest, where the collector
// sizes windows (collect.SizesWindows), so that the first stacks of a
// process through a large frameless frame (vfprintf's) are not cut.
func newProcessWindow() uint32 {
	if collect.SizesWindows {
		return sampler.WindowMax
	}
	return 0
}

// New builds the user-space stages on src: the symbolization, the
// collector and, when configured, the goroutine-wait sampler, all on
// one tracker and one symbolizer. Open calls it on the sampler it loads;
// tests call it on a fake source.
func New(cfg Config, src Source, parts Parts) (*Pipeline, error) {
	log := logger(cfg.Logger)
	p := &Pipeline{source: src, tracker: parts.Tracker, correlator: parts.Correlator, cfg: cfg, log: log}
	procRoot := parts.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	if p.tracker == nil {
		p.tracker = proc.NewTracker(procRoot, log)
		p.closers = append(p.closers, p.tracker.Close)
	}
	if len(cfg.Executables) > 0 {
		p.execs, p.match = map[string]bool{}, map[uint32]bool{}
		for _, e := range cfg.Executables {
			p.execs[e] = true
		}
	}
	sym, err := newSymbols(cfg.Symbolization, cfg.Budget, procRoot, log)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.symbols = sym
	// The collector's leaf recovery and the unwinder of cgo callbacks
	// read the same binaries: one set of tables, whose Go pclntabs are
	// the symbolizer's.
	tables := unwind.NewCache(log, unwind.CacheOptions{Pclntabs: sym.Symbolizer.Pclntabs(), MaxBytes: cfg.Budget.UnwindBytes()})
	p.tables = tables
	opts := collect.Options{Frequency: cfg.Frequency, Tracker: p.tracker, Logger: log,
		Symbolizer: sym.Symbolizer, Mode: sym.Mode, PerfMaps: sym.JIT.Cache,
		Leaf:       &collect.CFILeafFixer{Tables: tables, ReadMemory: parts.ReadMemory, PACMask: parts.PACMask},
		ParseBytes: cfg.Budget.ParseBytes()}
	if parts.Kernel != nil {
		opts.Kernel = parts.Kernel
	} else if k, err := symbolize.LoadKallsyms("/proc/kallsyms"); err != nil {
		log.Warn("kernel frames stay unsymbolized", "error", err)
	} else {
		opts.Kernel = collect.KernelFrames(k)
	}
	if c := parts.Correlator; c != nil {
		opts.Resource = func(pid uint32) (string, map[string]string) {
			info, _ := c.Info(pid)
			return info.ServiceName, info.Resource
		}
		opts.ContextKeys = func(pid uint32) []string {
			info, _ := c.Info(pid)
			return info.AttributeKeys
		}
	}
	// A sampler sizes the stack window of each process and widens it for
	// processes whose stacks it cut.
	if w, ok := src.(interface{ SetStackWindow(pid, bytes uint32) error }); ok {
		opts.StackWindow = w.SetStackWindow
	}
	if w, ok := src.(interface {
		SetExeWindow(dev uint32, ino uint64, inExe, other uint32) error
	}); ok && opts.StackWindow != nil {
		opts.ExeWindow = w.SetExeWindow
	}
	p.collector = collect.New(opts)
	if cfg.OffCPU.Enabled && cfg.GoWaitFrequency > 0 {
		// Goroutine waits park no thread: sample them from outside. Its
		// records reach the collector through the consumer
		// (GoroutineWaits); it names entry functions with the symbolizer
		// whose cache the budget bounds and unwinds cgo callbacks with the
		// same tables, where private ones would keep every Go binary ever
		// sampled, unbounded.
		p.goWait = gowait.New(gowait.Options{Frequency: cfg.GoWaitFrequency, Logger: log,
			Symbolizer: sym.Symbolizer, Tables: tables})
	}
	return p, nil
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Start inspects the named processes for trace context, so that their
// first samples carry span ids, starts the goroutine-wait sampler and the
// watcher, and attaches the programs Open loaded. ctx bounds the
// goroutine-wait sampler, which Close also stops.
func (p *Pipeline) Start(ctx context.Context) error {
	if p.sampler == nil {
		return errors.New("start pipeline: its source was not opened by Open")
	}
	// The system's dynamic loaders, while the command still holds what
	// attaching a uprobe takes: their link-map changes (late dlopens)
	// rescan the processes concerned.
	p.watch.WatchLoaders(tracectx.SystemLoaders)
	for _, pid := range p.cfg.PIDs {
		if err := p.watch.Scan(uint32(pid)); err != nil {
			p.log.Warn("inspect process for trace context", "pid", pid, "error", err)
		}
	}
	p.startGoWait(ctx)
	// The JIT perf maps' schedule (asking JVMs for their maps), stopped
	// by Close before the rest.
	p.closers = append([]func(){p.symbols.JIT.Start()}, p.closers...)
	stopWatch := make(chan struct{})
	go p.watch.Run(stopWatch)
	p.closers = append([]func(){func() { close(stopWatch) }}, p.closers...)
	if err := p.sampler.Start(); err != nil {
		return err
	}
	go p.sampler.Run()
	return nil
}

func (p *Pipeline) startGoWait(ctx context.Context) {
	if p.goWait == nil {
		return
	}
	for _, pid := range p.cfg.PIDs {
		if err := p.goWait.Add(uint32(pid)); err != nil {
			p.log.Debug("no goroutine sampling", "pid", pid, "error", err)
		}
	}
	gctx, cancel := context.WithCancel(ctx)
	p.stopGoWait, p.goWaitDone = cancel, make(chan struct{})
	if len(p.cfg.PIDs) == 0 {
		go p.goWait.Discover(gctx, 5*time.Second)
	}
	go func() { defer close(p.goWaitDone); p.goWait.Run(gctx) }()
}

// goroutineWaits delivers the goroutine-wait sampler's records, a batch
// per tick, for the loop to hand to HandleBatch; nil, a channel never
// ready, when the sampler is off.
func (p *Pipeline) goroutineWaits() <-chan []sampler.Record {
	if p.goWait == nil {
		return nil
	}
	return p.goWait.Records()
}

// HandleBatch hands each record of a goroutine-wait batch to Handle as an
// event of its own.
func (p *Pipeline) HandleBatch(b []sampler.Record) {
	for i := range b {
		p.Handle(sampler.Event{Sample: &b[i]})
	}
}

// stopGoWaits stops the goroutine-wait sampler, waits for its last tick
// and hands on every batch it delivered.
func (p *Pipeline) stopGoWaits() {
	if p.stopGoWait == nil {
		return
	}
	p.stopGoWait()
	<-p.goWaitDone
	for {
		select {
		case b := <-p.goWait.Records():
			p.HandleBatch(b)
		default:
			return
		}
	}
}

// Handle takes the next event of the stream: the one way samples and
// process events reach the stages, in ring order, from one goroutine.
// With Config.Executables, the samples of other processes are dropped
// and counted here.
func (p *Pipeline) Handle(e sampler.Event) {
	switch {
	case e.Sample != nil:
		if p.execs != nil && !p.wanted(e.Sample.PID) {
			p.filtered.Add(1)
			return
		}
		p.handled.Add(1)
		p.Add(e.Sample)
	case e.Proc != nil:
		if p.match != nil && !e.Proc.LinkMap {
			delete(p.match, e.Proc.PID) // an exec may change the executable
		}
		p.ProcEvent(*e.Proc)
	}
}

// wanted applies the process selection in user space: the kernel filter
// knows only PIDs, so naming executables means sampling everything.
func (p *Pipeline) wanted(pid uint32) bool {
	if ok, seen := p.match[pid]; seen {
		return ok
	}
	ok := false
	for _, n := range p.cfg.PIDs {
		if uint32(n) == pid {
			ok = true
		}
	}
	if !ok {
		pr := p.tracker.Get(pid)
		ok = p.execs[filepath.Base(pr.Exe)] || (pr.Exe == "" && p.execs[pr.Comm])
	}
	p.match[pid] = ok
	return ok
}

// Add hands one sample, the kernel's or the goroutine-wait sampler's, to
// the collector, noting its process for the trace-context watcher and the
// JIT perf maps.
func (p *Pipeline) Add(r *sampler.Record) {
	if p.correlator != nil {
		p.correlator.Seen(r.PID, RescanAfter)
	}
	p.symbols.JIT.Seen(r.PID)
	p.collector.Add(r)
}

// ProcEvent hands an exec or exit to the watcher, the JIT perf maps and
// the collector, a fork to the perf maps (the pid runs another image)
// and the collector: the watcher takes a new process at its first sample,
// as any process it has not seen; and a link-map change to the watcher
// alone (the collector reads a library a stack runs in as it meets it).
func (p *Pipeline) ProcEvent(e sampler.ProcEvent) {
	if e.LinkMap {
		if p.correlator != nil {
			p.correlator.LinkMap(e.PID)
		}
		return
	}
	if e.Fork {
		p.symbols.JIT.NewImage(e.PID)
		p.collector.ProcEvent(e)
		return
	}
	if e.Exit {
		// Its JIT names answer until the exited processes are forgotten.
		p.symbols.JIT.Exited(e.PID)
	}
	if p.correlator != nil {
		if e.Exit {
			p.correlator.Exit(e.PID)
		} else {
			p.correlator.Exec(e.PID)
			p.correlator.Seen(e.PID, 0)
		}
	}
	if !e.Exit {
		p.symbols.JIT.NewImage(e.PID)
	}
	p.collector.ProcEvent(e)
}

// drain stops the source and hands on, in order, everything the kernel
// wrote before the programs were detached (the sampler closes the channel
// once the ring is empty), then stops the goroutine-wait sampler and
// hands on its last ticks. The timeout only guards against a reader that
// never ends, and false says it was reached.
func (p *Pipeline) drain(timeout time.Duration) bool {
	p.source.Stop()
	ok := sampler.Drain(p.source.Events(), timeout, p.Handle)
	p.stopGoWaits()
	return ok
}

// Close stops what Start started and closes what Open and New opened.
func (p *Pipeline) Close() {
	if p.stopGoWait != nil {
		p.stopGoWait()
	}
	for _, c := range p.closers {
		c()
	}
	p.closers = nil
}
