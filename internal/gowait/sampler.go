// Package gowait samples the parked goroutines of Go processes from
// outside, for off-CPU profiles per span. A Go span that waits on a
// channel, a mutex, the network or a timer parks its goroutine: no thread
// blocks, so the kernel's sched_switch never sees that wait. At a fixed
// rate the sampler reads each target's goroutine list (runtime.allgs) with
// process_vm_readv and, for every goroutine in _Gwaiting, emits an
// off-CPU sample weighted by the time since the previous tick, with the
// runtime's wait reason, the span from the goroutine's labels, and the
// stack unwound by frame pointers from the saved g.sched registers. The
// target is neither stopped nor instrumented; the cost is the agent's.
package gowait

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/internal/unwind"
)

// DefaultFrequency is the default sampling rate in Hz: prime, so that it
// does not lock onto periodic work of the target.
const DefaultFrequency = 19

// Options configure a Sampler.
type Options struct {
	// Frequency is the sampling rate in Hz; zero means DefaultFrequency.
	Frequency  int
	Symbolizer *symbolize.Symbolizer // nil: a private one
	Tracker    *proc.Tracker         // nil: a private one on /proc
	Logger     *slog.Logger
	// Memory opens a process's memory; nil means process_vm_readv.
	Memory func(pid uint32) Memory
	// Tables caches unwind rules for the C frames of cgo callbacks; nil
	// means a private cache.
	Tables *unwind.Cache
}

// Stats counts what the sampler saw; every goroutine that was waiting but
// produced no sample is counted under one of the Dropped reasons.
type Stats struct {
	Ticks      uint64
	Goroutines uint64 // live goroutines read
	Waiting    uint64 // of which parked (_Gwaiting)
	Cached     uint64 // parked at the same place as at the previous tick
	Samples    uint64 // goroutine observations emitted (before aggregation)
	Linked     uint64 // of which inside a span
	// System goroutines (the runtime's own workers) waiting outside any
	// span are left out, as in the runtime's goroutine profile.
	System    uint64
	Truncated uint64 // stacks whose walk ended before runtime.goexit
	// DroppedInvalid: registers outside the goroutine's stack bounds.
	DroppedInvalid uint64
	// DroppedChanged: the goroutine ran, moved or died while read.
	DroppedChanged uint64
	// DroppedUnreadable: the g or its stack was not mapped.
	DroppedUnreadable uint64
	// DroppedLabels: the label set could not be read.
	DroppedLabels uint64
	TickErrors    uint64 // whole-process read failures
	// NativeCallbacks: goroutines parked inside a Go callback from C
	// whose C frames were unwound up to runtime.asmcgocall; NativeFrames
	// counts the frames added. NativeCut: such goroutines whose native
	// walk stopped earlier (bytes beyond the copy of the thread's stack,
	// code without unwind rules); their frames up to there are kept.
	NativeCallbacks, NativeFrames, NativeCut uint64
	// Held counts observations of a late tick (gap over two periods)
	// weighted by the whole gap: the goroutine was parked unchanged since
	// the previous tick, so it waited all that time.
	Held uint64
	// UncoveredNs is waiting time late ticks (a stalled agent, ticks the
	// ticker dropped) could not attribute: for each goroutine that
	// parked during the gap, the gap beyond the two-period cap.
	UncoveredNs uint64
}

// Sampler samples parked goroutines of its target processes. Its methods
// are safe for concurrent use.
type Sampler struct {
	opts   Options
	log    *slog.Logger
	period time.Duration

	mu      sync.Mutex
	targets map[uint32]*targetState
	samples []profile.Sample
	stats   Stats
	last    time.Time
}

// targetState is a target and its symbolization caches.
type targetState struct {
	*target
	frames   map[int]*stackFrames // stack id → symbolized stack
	mappings map[uint64]*profile.Mapping
}

type stackFrames struct {
	frames []profile.Frame
	system bool
}

// New returns a Sampler with no targets.
func New(opts Options) *Sampler {
	if opts.Frequency <= 0 {
		opts.Frequency = DefaultFrequency
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tracker == nil {
		opts.Tracker = proc.NewTracker("/proc", opts.Logger)
	}
	if opts.Symbolizer == nil {
		opts.Symbolizer = symbolize.New(opts.Logger, symbolize.Options{})
	}
	if opts.Tables == nil {
		opts.Tables = unwind.NewCache(opts.Logger, unwind.CacheOptions{})
	}
	if opts.Memory == nil {
		opts.Memory = func(pid uint32) Memory { return newProcessMemory(int(pid)) }
	}
	return &Sampler{
		opts: opts, log: opts.Logger,
		period:  time.Second / time.Duration(opts.Frequency),
		targets: map[uint32]*targetState{},
	}
}

// Add starts sampling process pid. It fails, wrapping
// tracectx.ErrNotGoBinary, tracectx.ErrUnsupportedGo or
// tracectx.ErrNoAllGSymbols, for a process it cannot sample.
func (s *Sampler) Add(pid uint32) error {
	exe := filepath.Join("/proc", fmt.Sprint(pid), "exe")
	info, err := tracectx.GoAllGOffsets(exe)
	if err != nil {
		return fmt.Errorf("inspect process %d: %w", pid, err)
	}
	p := s.opts.Tracker.Get(pid)
	var bias uint64
	if info.PIE {
		if bias, err = loadBias(exe, p); err != nil {
			return fmt.Errorf("inspect process %d: %w", pid, err)
		}
	}
	mem := s.opts.Memory(pid)
	t := newTarget(pid, mem, info, bias)
	tracker := s.opts.Tracker
	t.native = newNativeUnwinder(exe, bias, mem, func() *proc.Process { return tracker.Get(pid) }, s.opts.Tables, s.log)
	s.mu.Lock()
	s.targets[pid] = &targetState{target: t, frames: map[int]*stackFrames{}, mappings: map[uint64]*profile.Mapping{}}
	s.mu.Unlock()
	s.log.Debug("sampling goroutines", "pid", pid, "go", info.GoVersion, "g", info.GSource, "reasons", info.ReasonSource)
	return nil
}

// SetSymbolizer makes the sampler symbolize with sym from now on: the
// agent's, so that the Go binaries it samples are parsed, bounded and
// dropped once idle in one cache rather than in a private one as well.
func (s *Sampler) SetSymbolizer(sym *symbolize.Symbolizer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Symbolizer = sym
}

// Remove stops sampling pid.
func (s *Sampler) Remove(pid uint32) {
	s.mu.Lock()
	delete(s.targets, pid)
	s.mu.Unlock()
}

// Run samples at the configured rate until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	tick := time.NewTicker(s.period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.SampleOnce(time.Now())
		}
	}
}

// SampleOnce takes one sample of every target at now. Each observation
// stands for the time since the previous tick (the period at the first).
// A goroutine parked unchanged since an earlier tick waited all of it,
// however late this tick is: under load the agent's ticks come late, and
// capping those waits under-counted a 400 ms sleep by half. One that
// parked since the previous tick waited part of the gap: it gets at most
// two periods, and the rest is counted as uncovered, so a stalled agent
// does not inflate one observation.
func (s *Sampler) SampleOnce(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gap := s.period
	if !s.last.IsZero() {
		gap = max(now.Sub(s.last), 0)
	}
	s.last = now
	s.stats.Ticks++
	for pid, t := range s.targets {
		obs, err := t.tick(&s.stats)
		if err != nil {
			s.stats.TickErrors++
			if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(serr, os.ErrNotExist) {
				s.log.Debug("goroutine sampling: process exited", "pid", pid)
				delete(s.targets, pid)
				continue
			}
			s.log.Debug("goroutine sampling", "pid", pid, "error", err)
			continue
		}
		s.emit(t, obs, now, gap)
	}
}

// aggKey groups the observations of one tick: goroutines of one process
// parked in the same stack, for the same reason, in the same span (or
// none) become one sample. Ten thousand idle goroutines cost a handful of
// samples per tick, not ten thousand.
type aggKey struct {
	link   profile.Link
	reason uint8
	stack  int
}

func (s *Sampler) emit(t *targetState, obs []observed, now time.Time, gap time.Duration) {
	capped := min(gap, 2*s.period)
	// Most waiting goroutines are in no span: sum those by a packed
	// integer key, which hashes much faster than aggKey.
	unlinked := map[uint64]int64{}
	linked := map[aggKey]int64{}
	var order []aggKey
	for _, o := range obs {
		sf := t.symbolize(s, o.g)
		if sf.system && o.g.link.IsZero() {
			s.stats.System++
			continue
		}
		s.stats.Samples++
		w := capped
		if o.held {
			if gap > capped {
				s.stats.Held++
			}
			w = gap
		} else {
			s.stats.UncoveredNs += uint64(gap - capped)
		}
		k := aggKey{o.g.link, o.reason, o.g.stack}
		if o.g.link.IsZero() {
			packed := uint64(o.g.stack)<<8 | uint64(o.reason)
			if _, ok := unlinked[packed]; !ok {
				order = append(order, k)
			}
			unlinked[packed] += int64(w)
			continue
		}
		s.stats.Linked++
		if _, ok := linked[k]; !ok {
			order = append(order, k)
		}
		linked[k] += int64(w)
	}
	for _, k := range order {
		ns := linked[k]
		if k.link.IsZero() {
			ns = unlinked[uint64(k.stack)<<8|uint64(k.reason)]
		}
		s.samples = append(s.samples, profile.Sample{
			Kind: profile.OffCPU, PID: t.pid, ThreadName: "goroutine",
			Frames: t.frames[k.stack].frames, Link: k.link, Time: now,
			Value: ns, State: "S", Reason: t.reason(k.reason),
		})
	}
}

// symbolize resolves a stack once per distinct stack of the target. A
// stack whose entry function (the frame below runtime.goexit) is in the
// runtime, other than runtime.main, is a system goroutine, as the
// runtime's isSystemGoroutine decides.
func (t *targetState) symbolize(s *Sampler, g *parkedG) *stackFrames {
	if g.sf != nil {
		return g.sf
	}
	if sf, ok := t.frames[g.stack]; ok {
		g.sf = sf
		return sf
	}
	p := s.opts.Tracker.Get(t.pid)
	frames := make([]profile.Frame, 0, len(g.pcs))
	for i, pc := range g.pcs {
		if i > 0 {
			pc-- // a return address: look up the call instruction
		}
		frames = t.frame(s, p, frames, pc)
	}
	sf := &stackFrames{frames: frames}
	if n := len(frames); n >= 2 && frames[n-1].Function == "runtime.goexit" {
		entry := frames[n-2].Function
		sf.system = strings.HasPrefix(entry, "runtime.") && entry != "runtime.main"
	}
	t.frames[g.stack] = sf
	g.sf = sf
	return sf
}

func (t *targetState) frame(s *Sampler, p *proc.Process, dst []profile.Frame, pc uint64) []profile.Frame {
	m := p.Find(pc)
	if m == nil {
		return append(dst, profile.Frame{Address: pc, Mapping: t.mapping(&proc.Mapping{Path: "[unknown]"})})
	}
	pm := t.mapping(m)
	if m.Anonymous() || strings.HasPrefix(m.Path, "[") {
		return append(dst, profile.Frame{Address: pc, Mapping: pm})
	}
	obj, err := s.opts.Symbolizer.Open(p.OpenPath(m), m.Path)
	if err != nil {
		return append(dst, profile.Frame{Address: pc, Mapping: pm})
	}
	pm.BuildID, pm.HTLHash = obj.Identity().BuildID, obj.Identity().HTLHash
	return collect.ObjectFrames(dst, obj, pm, pc)
}

func (t *targetState) mapping(m *proc.Mapping) *profile.Mapping {
	if pm, ok := t.mappings[m.Start]; ok {
		return pm
	}
	pm := &profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, Path: m.Path}
	t.mappings[m.Start] = pm
	return pm
}

// Drain returns the samples taken since the last Drain.
func (s *Sampler) Drain() []profile.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.samples
	s.samples = nil
	return out
}

// Stats returns the counts so far.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Merge adds the samples taken since the last Drain to prof, and the
// processes they belong to when prof does not describe them yet.
func (s *Sampler) Merge(prof *profile.Profile) {
	samples := s.Drain()
	if prof.Processes == nil {
		prof.Processes = map[uint32]*profile.Process{}
	}
	for i := range samples {
		pid := samples[i].PID
		if _, ok := prof.Processes[pid]; ok {
			continue
		}
		p := s.opts.Tracker.Get(pid)
		prof.Processes[pid] = &profile.Process{
			PID: pid, ExePath: p.Exe, ExeName: filepath.Base(p.Exe),
			ContainerID: p.ContainerID, ServiceName: p.Env["OTEL_SERVICE_NAME"],
			Attributes: map[string]string{},
		}
	}
	prof.Samples = append(prof.Samples, samples...)
}

// loadBias returns where a position-independent executable was loaded:
// the start of its mapping at file offset 0 minus the lowest PT_LOAD
// address.
func loadBias(exe string, p *proc.Process) (uint64, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return 0, fmt.Errorf("open executable: %w", err)
	}
	defer f.Close()
	low := ^uint64(0)
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_LOAD && prog.Off == 0 {
			low = min(low, prog.Vaddr)
		}
	}
	for _, m := range p.Mappings {
		if m.Path == p.Exe && m.Offset == 0 && low != ^uint64(0) {
			return m.Start - low, nil
		}
	}
	return 0, errors.New("find load address of the executable: no mapping at offset 0")
}
