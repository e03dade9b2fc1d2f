package pipeline

import (
	"strings"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/elfmap"
	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/jvm"
	"github.com/spanprof/spanprof/internal/perfmap"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// Stats is one snapshot of every stage's counters: each stage's taken
// once, under its own lock, so that a scrape or a recording's summary
// reads each stage's fields as of one moment. The agent's metrics
// (internal/agent/metrics_table.go) and record's summary read it.
type Stats struct {
	// Counters are the sampler's kernel and user-space counters by name
	// (sampler.Sampler.Counters): "samples", "offcpu_samples", lost_*
	// (samples and process events that never reached the consumer),
	// exit_* (mappings of exited processes not captured), and the
	// errors of samples kept with a part missing. CountersErr is the
	// error of their read: a closed sampler cannot be read.
	Counters    map[string]uint64
	CountersErr error
	// Handled is the number of samples handed to the collector, Filtered
	// those of processes outside Config.Executables, dropped by design.
	Handled, Filtered uint64
	// Collector is what the collector did with the samples.
	Collector collect.Stats
	// Tracker is the process table's; Retained the processes it held
	// after the last ForgetExited.
	Tracker  proc.Stats
	Retained int64
	// Symbols is the symbolizer's, SymbolBytes its cache's size.
	Symbols     symbolize.Stats
	SymbolBytes int64
	// MappedBytes is the address space of the binaries' sections mapped
	// rather than read (elfmap.MappedBytes: Go pclntabs, .eh_frame and
	// .eh_frame_hdr, symbol tables while they are read), MappedFaults
	// the reads of them that faulted (elfmap.Faults).
	MappedBytes  int64
	MappedFaults uint64
	// Debuginfod is nil unless debuginfod servers are asked (Fetches).
	Debuginfod *debuginfod.Stats
	// PerfMaps are the JIT perf maps' counters, JVMs the requests to JVMs
	// for their maps (zero unless they are asked).
	PerfMaps perfmap.Stats
	JVMs     jvm.PerfMapStats
	// UnwindEvictedBound and UnwindEvictedIdle count the unwind tables
	// evicted for the bound and for being idle; UnwindBytes is their
	// cache's size.
	UnwindEvictedBound, UnwindEvictedIdle uint64
	UnwindBytes                           int64
	// GoWait is nil when the goroutine-wait sampler is off.
	GoWait *gowait.Stats
	// TraceContext is nil when no trace-context watcher that counts is
	// configured.
	TraceContext *correlate.Stats
}

// Stats takes the snapshot. It may be called from any goroutine.
func (p *Pipeline) Stats() Stats {
	st := Stats{
		Handled:     p.handled.Load(),
		Filtered:    p.filtered.Load(),
		Collector:   p.collector.Stats(),
		Tracker:     p.tracker.Stats(),
		Retained:    p.retained.Load(),
		Symbols:     p.symbols.Symbolizer.Stats(),
		SymbolBytes: p.symbols.Symbolizer.Bytes(),
		MappedBytes: elfmap.MappedBytes(), MappedFaults: elfmap.Faults(),
		PerfMaps: p.symbols.JIT.Cache.Stats(),
		JVMs:     p.symbols.JIT.Stats(),
	}
	st.Counters, st.CountersErr = p.source.Counters()
	if d := p.symbols.Debuginfod; d != nil {
		s := d.Stats()
		st.Debuginfod = &s
	}
	if p.tables != nil {
		st.UnwindEvictedBound, st.UnwindEvictedIdle = p.tables.Evicted()
		st.UnwindBytes = p.tables.Bytes()
	}
	if p.goWait != nil {
		s := p.goWait.Stats()
		st.GoWait = &s
	}
	if c, ok := p.correlator.(interface{ Stats() correlate.Stats }); ok {
		s := c.Stats()
		st.TraceContext = &s
	}
	return st
}

// Lost is the sum of the sampler's lost_* counters: samples (and process
// events) that never reached the consumer.
func (s *Stats) Lost() uint64 {
	var n uint64
	for k, v := range s.Counters {
		if strings.HasPrefix(k, "lost_") {
			n += v
		}
	}
	return n
}

// lostCounts keeps the counters that are losses, for the profile.
func lostCounts(c map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range c {
		if strings.HasPrefix(k, "lost_") && v > 0 {
			out[strings.TrimPrefix(k, "lost_")] = v
		}
	}
	return out
}
