package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/jit"
	"github.com/spanprof/spanprof/internal/jvm"
	"github.com/spanprof/spanprof/internal/perfmap"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

// registerSymbols registers the counters of the symbolizer, the JIT perf
// maps and the debuginfod client.
func registerSymbols(reg prometheus.Registerer, s *pipeline.Symbols) {
	sym := func(name, help string, v func(symbolize.Stats) uint64, labels ...string) prometheus.Collector {
		opts := prometheus.CounterOpts{Name: name, Help: help}
		if len(labels) == 2 {
			opts.ConstLabels = prometheus.Labels{labels[0]: labels[1]}
		}
		return prometheus.NewCounterFunc(opts, func() float64 { return float64(v(s.Symbolizer.Stats())) })
	}
	const evictedHelp = "Parsed binaries evicted from the cache, by reason: bound (the count or byte bound, or parsed again once a debug file arrived) or idle (unused for the idle timeout)."
	registerJIT(reg, s.JIT)
	reg.MustRegister(
		sym("spanprof_symbolize_objects_parsed_total", "Binaries whose symbol tables were parsed.",
			func(st symbolize.Stats) uint64 { return st.Parsed }),
		sym("spanprof_symbolize_objects_evicted_total", evictedHelp,
			func(st symbolize.Stats) uint64 { return st.Evicted - st.Expired }, "reason", "bound"),
		sym("spanprof_symbolize_objects_evicted_total", evictedHelp,
			func(st symbolize.Stats) uint64 { return st.Expired }, "reason", "idle"),
		sym("spanprof_symbolize_debug_files_total", "Separate debug files used.",
			func(st symbolize.Stats) uint64 { return st.DebugFiles }),
		sym("spanprof_symbolize_dwarf_loads_total", "Loads of DWARF section data: one per binary with DWARF, plus one per report that met a compile unit not seen since the data was released.",
			func(st symbolize.Stats) uint64 { return st.DWARFLoads }),
		sym("spanprof_symbolize_debug_files_rejected_total", "Debug files refused (build ID or CRC mismatch, corrupt).",
			func(st symbolize.Stats) uint64 { return st.RejectedBuildID + st.RejectedCRC + st.RejectedCorrupt }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spanprof_symbolize_cache_bytes",
			Help: "Bytes held by parsed symbol tables, counting the Go pclntabs shared with the unwind tables when the symbol cache pays for them."},
			func() float64 { return float64(s.Symbolizer.Bytes()) }),
	)
	if s.Debuginfod == nil {
		return
	}
	d := func(name, help string, v func(debuginfod.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(s.Debuginfod.Stats())) })
	}
	reg.MustRegister(
		d("spanprof_debuginfod_fetched_total", "Debug files downloaded.",
			func(st debuginfod.Stats) uint64 { return st.Fetched }),
		d("spanprof_debuginfod_failed_total", "Fetches that failed (not found, timeout, HTTP error, invalid, dropped).",
			func(st debuginfod.Stats) uint64 {
				return st.NotFound + st.Timeouts + st.HTTPError + st.Invalid + st.Dropped
			}),
	)
}

// registerJIT registers the counters of the JIT perf maps and of the
// requests to JVMs; all start at 0, and those of the requests stay there
// with no_jvm_perfmap.
func registerJIT(reg prometheus.Registerer, j *jit.Maps) {
	pm := func(name, help string, v func(perfmap.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(j.Cache.Stats())) })
	}
	const reqHelp = "Requests to JVMs to write their perf map (HotSpot attach, Compiler.perfmap), by result: ok, failed (no attach listener, timeout, a JVM without the command), or exited (the JVM was gone when asked)."
	req := func(result string, v func(jvm.PerfMapStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spanprof_jvm_perfmap_requests_total", Help: reqHelp,
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(v(j.Stats())) })
	}
	reg.MustRegister(
		req("ok", func(st jvm.PerfMapStats) uint64 { return st.Attaches }),
		req("failed", func(st jvm.PerfMapStats) uint64 { return st.Failures }),
		req("exited", func(st jvm.PerfMapStats) uint64 { return st.Exited }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spanprof_jvm_perfmap_rate_limited_total",
			Help: "Scheduled requests to JVMs not made because the JVM was asked less than 5s before."},
			func() float64 { return float64(j.Stats().Skipped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spanprof_jvm_perfmap_seconds_total",
			Help: "Time spent attaching to JVMs and waiting for them to write their perf maps."},
			func() float64 { return j.Stats().Time.Seconds() }),
		pm("spanprof_perf_map_reads_total", "JIT perf map files (/tmp/perf-PID.map) read or re-read after they changed.",
			func(st perfmap.Stats) uint64 { return st.Reads }),
		pm("spanprof_perf_map_bad_lines_total", "Lines of perf map files that did not parse and were skipped.",
			func(st perfmap.Stats) uint64 { return st.BadLines }),
		pm("spanprof_jitdump_malformed_total", "Reads of jitdump files (/tmp/jit-PID.dump, read for processes without a perf map) that found the header or a record malformed; the records before a bad one are kept.",
			func(st perfmap.Stats) uint64 { return st.BadDumps }),
		pm("spanprof_perf_map_kept_entries_total", "Entries of earlier versions of rewritten perf maps (a JVM's) kept because no new entry covers their code.",
			func(st perfmap.Stats) uint64 { return st.Kept }),
	)
}

// registerUnwindTables registers the counters of the unwind tables, whose
// bound is the unwind part of the symbol cache budget.
func registerUnwindTables(reg prometheus.Registerer, t *unwind.Cache) {
	if t == nil {
		return
	}
	const help = "Unwind tables evicted from the cache, by reason: bound (the unwind part of the symbol cache budget, or the count bound) or idle (unused for the idle timeout). An evicted table is read again when a sample needs it."
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spanprof_unwind_tables_evicted_total", Help: help,
			ConstLabels: prometheus.Labels{"reason": "bound"}}, func() float64 { b, _ := t.Evicted(); return float64(b) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spanprof_unwind_tables_evicted_total", Help: help,
			ConstLabels: prometheus.Labels{"reason": "idle"}}, func() float64 { _, i := t.Evicted(); return float64(i) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spanprof_unwind_tables_cache_bytes",
			Help: "Bytes held by the unwind tables, counting the Go pclntabs shared with the symbolizer when this cache pays for them."},
			func() float64 { return float64(t.Bytes()) }),
	)
}
