package pipeline

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/jit"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// Symbolization says where symbols come from (docs/symbolization.md).
type Symbolization struct {
	// Mode is resolved by the command (symbolize.ResolveMode), whose
	// flags or configuration name it.
	Mode symbolize.Mode
	// DebugDirs are searched for separate debug files before
	// /usr/lib/debug.
	DebugDirs []string
	// DebuginfodURLs are asked in ModeFull.
	DebuginfodURLs []string
	// NoJVMPerfmap stops asking running JVMs to write their perf maps.
	NoJVMPerfmap bool
	// OnlyDebugDirs searches DebugDirs alone, not /usr/lib/debug: a
	// replay (test/replay) symbolizes with the files it recorded,
	// whatever debug files the machine has installed.
	OnlyDebugDirs bool
}

// Budget bounds what the pipeline holds in memory, and where it spills.
type Budget struct {
	// CacheMiB bounds the estimated memory of parsed binaries: symbol
	// tables, Go pclntabs and DWARF unit tables (SymbolBytes) and the
	// unwind tables (UnwindBytes), each least recently used evicted
	// first; 0 means each cache's default.
	CacheMiB int
	// DWARFSpillDir keeps compressed DWARF (libc6-dbg's) decompressed on
	// disk, so that it is read back instead of inflated again once
	// released or evicted; empty keeps none.
	DWARFSpillDir string
	// RingMiB sizes the ring buffer the kernel writes samples into (a
	// power of two, at least 2); 0 keeps the object's 8 MiB.
	RingMiB int
	// GCPercent and LimitMiB set the Go runtime's GOGC and GOMEMLIMIT
	// (ApplyRuntime); 0 leaves each as it is.
	GCPercent, LimitMiB int
}

// DefaultCacheMiB is the symbol cache bound both commands default to.
const DefaultCacheMiB = 32

// UnwindShare is the part of CacheMiB, in eighths, that the unwind tables
// get (the leaf fixer's CFI rows and the Go pclntabs it claims first); the
// symbolizer gets the rest. The two caches share the Go pclntabs, each
// charged once, so the budget is one sum.
const UnwindShare = 2

// SymbolBytes is the symbolizer's part of the budget; 0 when CacheMiB is
// 0 (the symbolizer's default).
func (b Budget) SymbolBytes() int64 {
	return int64(b.CacheMiB) << 20 * (8 - UnwindShare) / 8
}

// UnwindBytes is the unwind tables' part of the budget; 0 when CacheMiB
// is 0 (the unwind cache's default).
func (b Budget) UnwindBytes() int64 {
	return int64(b.CacheMiB) << 20 * UnwindShare / 8
}

// ParseShare is the part of CacheMiB, in eighths, that one report may
// parse of binaries not parsed yet (collect.Options.ParseBytes): a stack
// needing more waits, with its addresses, for a later report. A new
// agent meets every binary of the node at its first report; parsed at
// once, their tables and the garbage of reading them made its peak.
const ParseShare = 1

// ParseBytes is the parse bound of one report (ParseShare of CacheMiB);
// 0, no bound, when CacheMiB is 0.
func (b Budget) ParseBytes() int64 {
	return int64(b.CacheMiB) << 20 * ParseShare / 8
}

// DefaultGCPercent is the GOGC both commands default to: their garbage
// comes in a burst when a profile is built, on a small live heap, and 50
// (Go's default is 100) keeps the peak lower for little CPU.
const DefaultGCPercent = 50

// DefaultDWARFSpillDir is where decompressed DWARF is kept by default.
func DefaultDWARFSpillDir() string { return filepath.Join(os.TempDir(), "spanprof-dwarf") }

// ApplyRuntime sets the garbage collector's target and the soft memory
// limit from b, unless GOGC or GOMEMLIMIT set them.
func ApplyRuntime(b Budget, env func(string) (string, bool), log *slog.Logger) {
	if v, ok := env("GOGC"); ok {
		log.Debug("GOGC from the environment", "gogc", v)
	} else if b.GCPercent > 0 {
		debug.SetGCPercent(b.GCPercent)
	}
	if v, ok := env("GOMEMLIMIT"); ok {
		log.Debug("GOMEMLIMIT from the environment", "gomemlimit", v)
	} else if b.LimitMiB > 0 {
		debug.SetMemoryLimit(int64(b.LimitMiB) << 20)
	}
}

// Symbols is what a pipeline symbolizes with.
type Symbols struct {
	Mode       symbolize.Mode
	Symbolizer *symbolize.Symbolizer
	// JIT holds the perf maps of JIT code (its Cache) and, unless turned
	// off, asks JVMs for theirs.
	JIT *jit.Maps
	// Debuginfod is nil unless ModeFull with servers: in ModeFull without
	// any, only local debug files are read, which the command says.
	Debuginfod *debuginfod.Client
}

// NewSymbols builds the symbolizer (debug directories, debuginfod in
// ModeFull, the budget's bound and spill directory) and the JIT perf maps.
// Frames of binaries whose debug file is still being fetched keep
// module+offset and build ID until the fetch ends.
func NewSymbols(cfg Symbolization, b Budget, log *slog.Logger) (*Symbols, error) {
	return newSymbols(cfg, b, "", log)
}

// newSymbols is NewSymbols with the JIT perf maps read through procRoot.
func newSymbols(cfg Symbolization, b Budget, procRoot string, log *slog.Logger) (*Symbols, error) {
	s := &Symbols{Mode: cfg.Mode, JIT: jit.New(procRoot, !cfg.NoJVMPerfmap && cfg.Mode != symbolize.ModeNone, log)}
	dirs := append([]string{}, cfg.DebugDirs...)
	if !cfg.OnlyDebugDirs {
		dirs = append(dirs, "/usr/lib/debug")
	}
	opts := symbolize.Options{Mode: cfg.Mode, DebugDirs: dirs,
		DWARFSpillDir: b.DWARFSpillDir, MaxBytes: b.SymbolBytes()}
	if cfg.Mode == symbolize.ModeFull && len(cfg.DebuginfodURLs) > 0 {
		c, err := debuginfod.New(debuginfod.Options{URLs: cfg.DebuginfodURLs, Verify: symbolize.VerifyDebugFile, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("debuginfod client: %w", err)
		}
		s.Debuginfod = c
		opts.Fetcher = c
	}
	s.Symbolizer = symbolize.New(log, opts)
	return s, nil
}
