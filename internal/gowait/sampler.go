// Package gowait samples the parked goroutines of Go processes from
// outside, for off-CPU profiles per span. A Go span that waits on a
// channel, a mutex, the network or a timer parks its goroutine: no thread
// blocks, so the kernel's sched_switch never sees that wait. At a fixed
// rate the sampler reads each target's goroutine list (runtime.allgs) with
// process_vm_readv and, for every goroutine in _Gwaiting, emits an
// off-CPU record weighted by the time since the previous tick, with the
// runtime's wait reason, the span from the goroutine's labels, and the
// stack unwound by frame pointers from the saved g.sched registers. The
// target is neither stopped nor instrumented; the cost is the agent's.
//
// The records are the sampler's own kind (sampler.Record), delivered a
// batch per tick (Records) to the consumer of the kernel's events, which
// hands them to the collector like any other: the stacks are symbolized,
// the processes described and the samples exported by the one pipeline.
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

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
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
	Frequency int
	// Symbolizer names the entry function of each distinct stack, which
	// tells the runtime's own goroutines; nil: a private one.
	Symbolizer *symbolize.Symbolizer
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
	Records    uint64 // records delivered, one per aggregate of a tick
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
	// DroppedBacklog counts records of ticks the consumer had not made
	// room for: BacklogTime's worth of ticks were waiting already.
	DroppedBacklog uint64
}

// BacklogTime is how long the ticks' batches may wait for the consumer
// before a tick is dropped (counted in Stats.DroppedBacklog): more than a
// report or a drain of the ring takes. The backlog is that many ticks at
// the sampler's rate, so that it covers as long at any rate: a fixed 64
// ticks were 3.4 s at the default 19 Hz but 0.32 s at 199 Hz, and one
// slow report dropped a fifth of a span's wait.
const BacklogTime = 3 * time.Second

// minBacklog is the fewest ticks the backlog holds, at low rates.
const minBacklog = 64

// backlog returns the ticks BacklogTime holds at frequency Hz.
func backlog(frequency int) int {
	return max(minBacklog, int(BacklogTime.Seconds()*float64(frequency)))
}

// Sampler samples parked goroutines of its target processes. Its methods
// are safe for concurrent use.
type Sampler struct {
	opts   Options
	log    *slog.Logger
	period time.Duration
	out    chan []sampler.Record

	mu      sync.Mutex
	targets map[uint32]*targetState
	stats   Stats
	last    time.Time
	// batch gathers one tick's records.
	batch []sampler.Record
}

// targetState is a target and what is known of its distinct stacks.
type targetState struct {
	*target
	// openPath opens the executable (/proc/PID/exe); exe is its path as
	// the process names it.
	openPath, exe string
	// system says, per stack id, whether the stack is a system
	// goroutine's.
	system map[int]bool
}

// New returns a Sampler with no targets.
func New(opts Options) *Sampler {
	if opts.Frequency <= 0 {
		opts.Frequency = DefaultFrequency
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
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
		out:     make(chan []sampler.Record, backlog(opts.Frequency)),
		targets: map[uint32]*targetState{},
	}
}

// Records delivers the records of each tick that found waiting
// goroutines, one batch per tick, in the order of the ticks.
func (s *Sampler) Records() <-chan []sampler.Record { return s.out }

// Add starts sampling process pid. It fails, wrapping
// tracectx.ErrNotGoBinary, tracectx.ErrUnsupportedGo or
// tracectx.ErrNoAllGSymbols, for a process it cannot sample.
func (s *Sampler) Add(pid uint32) error {
	exe := filepath.Join("/proc", fmt.Sprint(pid), "exe")
	info, err := tracectx.GoAllGOffsets(exe)
	if err != nil {
		return fmt.Errorf("inspect process %d: %w", pid, err)
	}
	view := &procView{pid: pid}
	p, err := view.read()
	if err != nil {
		return fmt.Errorf("inspect process %d: %w", pid, err)
	}
	var bias uint64
	if info.PIE {
		if bias, err = loadBias(exe, p); err != nil {
			return fmt.Errorf("inspect process %d: %w", pid, err)
		}
	}
	mem := s.opts.Memory(pid)
	t := newTarget(pid, mem, info, bias)
	t.native = newNativeUnwinder(exe, bias, mem, view.get, s.opts.Tables, s.log)
	s.mu.Lock()
	s.targets[pid] = &targetState{target: t, openPath: exe, exe: p.Exe, system: map[int]bool{}}
	s.mu.Unlock()
	s.log.Debug("sampling goroutines", "pid", pid, "go", info.GoVersion, "g", info.GSource, "reasons", info.ReasonSource)
	return nil
}

// SetSymbolizer makes the sampler name entry functions with sym from now
// on: the agent's, so that the Go binaries it samples are parsed, bounded
// and dropped once idle in one cache rather than in a private one as
// well.
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

// SampleOnce takes one sample of every target at now and delivers its
// records as one batch. Each observation stands for the time since the
// previous tick (the period at the first). A goroutine parked unchanged
// since an earlier tick waited all of it, however late this tick is:
// under load the agent's ticks come late, and capping those waits
// under-counted a 400 ms sleep by half. One that parked since the
// previous tick waited part of the gap: it gets at most two periods, and
// the rest is counted as uncovered, so a stalled agent does not inflate
// one observation.
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
	if len(s.batch) == 0 {
		return
	}
	select {
	case s.out <- s.batch:
		s.stats.Records += uint64(len(s.batch))
	default:
		s.stats.DroppedBacklog += uint64(len(s.batch))
		s.log.Debug("goroutine sampling: consumer behind, tick dropped", "records", len(s.batch), "backlog", cap(s.out))
	}
	s.batch = nil
}

// aggKey groups the observations of one tick: goroutines of one process
// parked in the same stack, for the same reason, in the same span (or
// none) become one record. Ten thousand idle goroutines cost a handful of
// records per tick, not ten thousand.
type aggKey struct {
	link   sampler.Link
	reason uint8
	stack  int
}

// aggregate is one record's observations: their stack and total weight.
type aggregate struct {
	pcs []uint64
	ns  int64
}

func (s *Sampler) emit(t *targetState, obs []observed, now time.Time, gap time.Duration) {
	capped := min(gap, 2*s.period)
	// Most waiting goroutines are in no span: sum those by a packed
	// integer key, which hashes much faster than aggKey.
	unlinked := map[uint64]*aggregate{}
	linked := map[aggKey]*aggregate{}
	var order []aggKey
	for _, o := range obs {
		if o.g.link == (sampler.Link{}) && t.isSystem(s, o.g) {
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
		var a *aggregate
		if o.g.link == (sampler.Link{}) {
			packed := uint64(o.g.stack)<<8 | uint64(o.reason)
			if a = unlinked[packed]; a == nil {
				a = &aggregate{pcs: o.g.pcs}
				unlinked[packed] = a
				order = append(order, k)
			}
		} else {
			s.stats.Linked++
			if a = linked[k]; a == nil {
				a = &aggregate{pcs: o.g.pcs}
				linked[k] = a
				order = append(order, k)
			}
		}
		a.ns += int64(w)
	}
	for _, k := range order {
		a := linked[k]
		if k.link == (sampler.Link{}) {
			a = unlinked[uint64(k.stack)<<8|uint64(k.reason)]
		}
		// The stack is the interned one: records share it, and no stage
		// writes to a record's stack.
		s.batch = append(s.batch, sampler.Record{
			Kind: sampler.OffCPU, PID: t.pid, Comm: "goroutine", Time: now,
			Value: a.ns, State: 'S', Link: k.link, UserStack: a.pcs,
			Reason: t.reason(k.reason),
		})
	}
}

// isSystem tells, once per distinct stack of the target, whether g is a
// system goroutine, as the runtime's isSystemGoroutine decides: its entry
// function (the frame below runtime.goexit) is in the runtime, other than
// runtime.main. A stack whose entry cannot be named is not.
func (t *targetState) isSystem(s *Sampler, g *parkedG) bool {
	if sys, ok := t.system[g.stack]; ok {
		return sys
	}
	sys := false
	if n := len(g.pcs); n >= 2 && t.exe != "" {
		obj, err := s.opts.Symbolizer.Open(t.openPath, t.exe)
		if err == nil {
			// Return addresses (all but the first pc): look up their
			// call instructions.
			name := func(i int) string {
				pc := g.pcs[i] - t.bias
				if i > 0 {
					pc--
				}
				sym, _ := obj.Lookup(pc)
				return sym.Function
			}
			if name(n-1) == "runtime.goexit" {
				entry := name(n - 2)
				sys = strings.HasPrefix(entry, "runtime.") && entry != "runtime.main"
			}
		}
	}
	t.system[g.stack] = sys
	return sys
}

// Stats returns the counts so far.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
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

// procView is the sampler's own read of a target's executable mappings,
// for its load bias and the C frames of cgo callbacks. The pipeline's
// process table (proc.Tracker) belongs to the consumer of the event
// stream alone, which changes it in stream order; a read from this
// goroutine would add a process at no place in the stream.
type procView struct {
	pid    uint32
	p      *proc.Process
	readAt time.Time
}

// viewAge is how long a view's mappings are trusted before a walk of C
// frames reads them again (a library may have been loaded since).
const viewAge = 10 * time.Second

func (v *procView) read() (*proc.Process, error) {
	dir := filepath.Join("/proc", fmt.Sprint(v.pid))
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil {
		return nil, fmt.Errorf("read executable: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := proc.ParseMaps(f)
	if err != nil {
		return nil, err
	}
	v.p, v.readAt = &proc.Process{PID: v.pid, Exe: exe, Mappings: ms}, time.Now()
	return v.p, nil
}

// get returns the view, read again once older than viewAge; the last
// read when that fails (the process is exiting).
func (v *procView) get() *proc.Process {
	if time.Since(v.readAt) > viewAge {
		if _, err := v.read(); err != nil {
			v.readAt = time.Now()
		}
	}
	return v.p
}
