package agent

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/perfmap"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// symbolization is what the agent symbolizes with, per its configuration.
type symbolization struct {
	mode       symbolize.Mode
	symbolizer *symbolize.Symbolizer
	perfMaps   *perfmap.Cache
	debuginfod *debuginfod.Client // nil unless mode full with servers
	urls       int                // debuginfod servers configured
}

// newSymbolization builds the symbolizer (debug dirs, debuginfod in full
// mode) and the JIT perf-map cache, and registers their counters. In full
// mode, frames of binaries whose debug file is still being fetched keep
// module+offset and build ID; the reports after the fetch resolve them.
func newSymbolization(cfg Symbolization, log *slog.Logger, reg prometheus.Registerer) (*symbolization, error) {
	urls := cfg.DebuginfodURLs
	if len(urls) == 0 {
		urls = debuginfod.URLsFromEnv()
	}
	mode, err := symbolize.ResolveMode(cfg.Mode, len(urls) > 0)
	if err != nil {
		return nil, err
	}
	s := &symbolization{mode: mode, perfMaps: perfmap.New(perfmap.Options{}), urls: len(urls)}
	opts := symbolize.Options{Mode: mode, DebugDirs: append(append([]string{}, cfg.DebugDirs...), "/usr/lib/debug"),
		DWARFSpillDir: cfg.DWARFCacheDir, MaxBytes: int64(cfg.CacheMiB) << 20}
	if mode == symbolize.ModeFull {
		if len(urls) == 0 {
			log.Warn("symbolization mode full without debuginfod URLs: local debug files only")
		} else {
			c, err := debuginfod.New(debuginfod.Options{URLs: urls, Verify: symbolize.VerifyDebugFile, Logger: log})
			if err != nil {
				return nil, fmt.Errorf("debuginfod client: %w", err)
			}
			s.debuginfod = c
			opts.Fetcher = c
		}
	}
	s.symbolizer = symbolize.New(log, opts)
	if reg != nil {
		s.register(reg)
	}
	return s, nil
}

func (s *symbolization) register(reg prometheus.Registerer) {
	sym := func(name, help string, v func(symbolize.Stats) uint64, labels ...string) prometheus.Collector {
		opts := prometheus.CounterOpts{Name: name, Help: help}
		if len(labels) == 2 {
			opts.ConstLabels = prometheus.Labels{labels[0]: labels[1]}
		}
		return prometheus.NewCounterFunc(opts, func() float64 { return float64(v(s.symbolizer.Stats())) })
	}
	const evictedHelp = "Parsed binaries evicted from the cache, by reason: bound (the count or byte bound, or parsed again once a debug file arrived) or idle (unused for the idle timeout)."
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
			func() float64 { return float64(s.symbolizer.Bytes()) }),
	)
	if s.debuginfod == nil {
		return
	}
	d := func(name, help string, v func(debuginfod.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(s.debuginfod.Stats())) })
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
