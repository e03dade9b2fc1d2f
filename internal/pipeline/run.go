package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// Hooks are what a command adds to the loop Run runs: the rest, which
// events go where and in which order, is the pipeline's.
type Hooks struct {
	// Every is the period of Tick; 0 never calls it.
	Every time.Duration
	// Tick is called every Every, between two events, on the loop's
	// goroutine: the agent reports, record shows its progress and checks
	// its targets. It returns false to end the loop.
	Tick func() bool
	// EndWithSource ends the loop when the source closes (its reader
	// ended): a recording then writes what was read. Without it the loop
	// goes on, with the goroutine-wait sampler and Tick, until ctx ends.
	EndWithSource bool
	// Stopping is called once the loop ended, before the source is
	// stopped and drained.
	Stopping func()
}

// DrainTimeout bounds the drain at the end of Run, which only guards
// against a reader that never ends.
const DrainTimeout = 10 * time.Second

// ErrNotDrained says the source was not drained within DrainTimeout: what
// was read is handed on, the rest is not.
var ErrNotDrained = errors.New("sampler not drained after " + DrainTimeout.String())

// Run is the pipeline's one consumer: it takes the kernel's events in ring
// order and the goroutine-wait sampler's batches as they come, and hands
// each to Handle, until ctx ends, Tick returns false, or (EndWithSource)
// the source closes. Then it calls Stopping, stops the source and hands
// on everything the kernel wrote before the programs were detached, and
// the goroutine-wait sampler's last ticks; ErrNotDrained says that took
// longer than DrainTimeout. Emit, Build and Stats then see every event.
func (p *Pipeline) Run(ctx context.Context, h Hooks) error {
	var tick <-chan time.Time
	if h.Every > 0 && h.Tick != nil {
		t := time.NewTicker(h.Every)
		defer t.Stop()
		tick = t.C
	}
	events, goWaits := p.source.Events(), p.goroutineWaits()
loop:
	for ctx.Err() == nil {
		select {
		case e, ok := <-events:
			if !ok {
				if h.EndWithSource {
					break loop
				}
				events = nil
				continue
			}
			p.Handle(e)
		case b := <-goWaits:
			p.HandleBatch(b)
		case <-tick:
			if !h.Tick() {
				break loop
			}
		case <-ctx.Done():
		}
	}
	if h.Stopping != nil {
		h.Stopping()
	}
	if !p.drain(DrainTimeout) {
		return ErrNotDrained
	}
	return nil
}

// Handled is the number of samples Handle took so far (those the
// executable filter dropped not counted).
func (p *Pipeline) Handled() uint64 { return p.handled.Load() }

// Emit builds the profile of an interval, handing each sample to add as
// it goes (the agent's aggregate), and trims the caches after it: a JVM
// whose samples land in JIT code its map does not cover is asked again
// once per interval (jit.Maps.Round), and DWARF section data loaded for
// the interval goes (the tables built from it stay), as do the symbol and
// unwind tables of binaries not seen for a while.
//
// A stack that needs a binary beyond the report's parse bound
// (Budget.ParseBytes) waits for a later Emit; last takes everything (the
// agent's last report).
func (p *Pipeline) Emit(end time.Time, add func(*profile.Sample), last bool) *profile.Profile {
	p.symbols.JIT.Round()
	var prof *profile.Profile
	if last {
		prof = p.collector.EmitAll(end, add)
	} else {
		prof = p.collector.Emit(end, add)
	}
	p.symbols.Symbolizer.Trim()
	p.collector.Trim()
	return prof
}

// ForgetExited forgets the processes whose exit was handled before
// before: in the tracker, the JIT perf maps and the trace-context
// watcher. The executable filter reads each process again afterwards.
// Call it from the loop's goroutine (a Tick) or after Run.
func (p *Pipeline) ForgetExited(before time.Time) {
	p.tracker.ForgetExited(before)
	p.symbols.JIT.ForgetExited(before)
	p.retained.Store(int64(p.tracker.Len()))
	if p.correlator != nil {
		p.correlator.ForgetExited(before)
	}
	clear(p.match)
}

// Build ends a recording after Run: it asks JVMs for their last maps and
// builds the whole profile, with what was lost on the way (the sampler's
// lost_* counters, without the prefix, and the goroutines the
// goroutine-wait sampler found waiting but could not sample) in its Lost.
func (p *Pipeline) Build(end time.Time) *profile.Profile {
	p.symbols.JIT.Final()
	prof := p.collector.Build(end)
	counters, _ := p.source.Counters()
	prof.Lost = lostCounts(counters)
	if p.goWait != nil {
		st := p.goWait.Stats()
		for k, v := range map[string]uint64{
			"go_wait_invalid":      st.DroppedInvalid,
			"go_wait_changed":      st.DroppedChanged,
			"go_wait_unreadable":   st.DroppedUnreadable,
			"go_wait_labels":       st.DroppedLabels,
			"go_wait_backlog":      st.DroppedBacklog,
			"go_wait_uncovered_ns": st.UncoveredNs,
		} {
			if v > 0 {
				prof.Lost[k] = v
			}
		}
	}
	return prof
}

// WaitDebugFiles requests the debug files the samples need from
// debuginfod and waits, up to wait, for the fetches to end, calling
// waiting with the number still pending when it starts to. It returns how
// many were still being fetched at the end: their frames keep module,
// offset and build ID, for a backend to resolve. Without debuginfod it
// does nothing.
func (p *Pipeline) WaitDebugFiles(ctx context.Context, wait time.Duration, waiting func(n int)) (left int) {
	d := p.symbols.Debuginfod
	if d == nil {
		return 0
	}
	p.collector.Prepare()
	if d.Pending() == 0 || wait <= 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return d.Wait(ctx, waiting)
}

// AttachesJVMs reports whether the pipeline asks JVMs for their perf maps,
// which needs the capability to attach to them.
func (p *Pipeline) AttachesJVMs() bool { return p.symbols.JIT.JVMs != nil }

// Symbolization is where the pipeline's symbols come from, as configured.
func (p *Pipeline) Symbolization() Symbolization { return p.cfg.Symbolization }

// Fetches reports whether the pipeline asks debuginfod servers: mode full
// with servers configured.
func (p *Pipeline) Fetches() bool { return p.symbols.Debuginfod != nil }
