package check

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/internal/unwind"
)

// SDKModule is the Go module whose presence in a binary's build info means
// the service publishes span context in goroutine labels.
const SDKModule = "github.com/spanprof/spanprof/sdk/go"

// ErrNotELF is returned for a file that is not an ELF object.
var ErrNotELF = errors.New("not an ELF file")

// elfInfo is what one ELF file tells the checker; it holds no open files.
type elfInfo struct {
	Machine   elf.Machine
	Type      elf.Type
	PIE       bool
	SharedLib bool
	// BuildID is the NT_GNU_BUILD_ID descriptor; nil when absent.
	BuildID []byte
	// Stripped means no .symtab: only .dynsym names are left.
	Stripped  bool
	DebugLink string
	// DebugFile is a local file with the symbols, when one was found.
	DebugFile string
	Go        bool
	GoSDK     bool
	// ThreadCtx is "" when otel_thread_ctx_v1 is absent, "ok" when exported
	// right, else why the agent cannot use it.
	ThreadCtx     string
	SetTraceCtxFn bool
	// ElasticCtx: exports Elastic APM's
	// elastic_apm_profiling_correlation_tls_v1 (TLS in .dynsym), which
	// the agent reads too.
	ElasticCtx bool
	FP         fpStats
	// FromFDE: FP's functions are the FDEs of a file without symbols;
	// FDECoverage is the share of .text they cover.
	FromFDE     bool
	FDECoverage float64
}

// publishesContext reports whether the file on its own lets the agent read
// span context.
func (e *elfInfo) publishesContext() bool {
	return e.ThreadCtx == "ok" || e.SetTraceCtxFn || e.GoSDK || e.ElasticCtx
}

// elfOptions says where to look for debug files; tests point it elsewhere.
type elfOptions struct {
	// DebugRoot is normally /usr/lib/debug.
	DebugRoot string
}

// analyzeELFFile opens path and analyzes it.
func analyzeELFFile(path string, opt elfOptions) (*elfInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	info, err := analyzeELF(f, opt, path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return info, nil
}

// analyzeELF reads an ELF image. path is the file's, whose directory
// resolves a .gnu_debuglink and whose name names functions without
// symbols; it may be empty.
func analyzeELF(r io.ReaderAt, opt elfOptions, path string) (*elfInfo, error) {
	dir := ""
	if path != "" {
		dir = filepath.Dir(path)
	}
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, ErrNotELF
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("parse elf: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("unsupported machine %v %v: only x86-64 and AArch64 are checked", f.Class, f.Machine)
	}
	info := &elfInfo{Machine: f.Machine, Type: f.Type}
	info.BuildID = gnuBuildID(f)
	info.Go = f.Section(".gopclntab") != nil || f.Section(".go.buildinfo") != nil
	if info.Go {
		if bi, err := buildinfo.Read(r); err == nil {
			for _, d := range bi.Deps {
				if d.Path == SDKModule {
					info.GoSDK = true
				}
			}
			if bi.Main.Path == SDKModule {
				info.GoSDK = true
			}
		}
	}
	info.PIE, info.SharedLib = classifyDyn(f)
	if s := f.Section(".gnu_debuglink"); s != nil {
		if d, err := s.Data(); err == nil {
			if i := bytes.IndexByte(d, 0); i > 0 {
				info.DebugLink = string(d[:i])
			}
		}
	}
	symtab, symErr := f.Symbols()
	info.Stripped = errors.Is(symErr, elf.ErrNoSymbols)
	dynsyms, _ := f.DynamicSymbols()
	info.ThreadCtx, info.SetTraceCtxFn = contextExports(symtab, dynsyms)
	info.ElasticCtx = elasticExport(dynsyms)
	if !info.GoSDK && info.Go {
		for _, s := range symtab {
			if strings.HasPrefix(s.Name, SDKModule+".") {
				info.GoSDK = true
				break
			}
		}
	}

	funcs, source := symtab, ".symtab"
	if info.Stripped {
		funcs, source = dynsyms, ".dynsym"
		if dbg := findDebugFile(opt, info, dir); dbg != "" {
			if syms, err := symbolsOf(dbg); err == nil {
				info.DebugFile = dbg
				funcs, source = syms, dbg
			}
		}
	}
	if info.Stripped && info.DebugFile == "" && !info.Go {
		// No symbols: the unwind tables still delimit every function.
		if ranges, err := unwind.FunctionRanges(f); err == nil && len(ranges) > 0 {
			info.FP, info.FDECoverage = analyzeFDEFunctions(f, filepath.Base(path), ranges, dynsyms)
			info.FromFDE = true
			return info, nil
		}
	}
	info.FP = analyzeFramePointers(f, funcs, info.Go)
	info.FP.Source = source
	return info, nil
}

// gnuBuildID returns the descriptor of the first NT_GNU_BUILD_ID note.
func gnuBuildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		d, err := s.Data()
		if err != nil {
			continue
		}
		if id := findNote(d, f.ByteOrder, "GNU", 3); id != nil {
			return id
		}
	}
	return nil
}

// findNote walks ELF note records and returns the descriptor of the first
// one with the given owner and type.
func findNote(d []byte, bo binary.ByteOrder, owner string, typ uint32) []byte {
	for len(d) >= 12 {
		namesz, descsz, t := bo.Uint32(d), bo.Uint32(d[4:]), bo.Uint32(d[8:])
		d = d[12:]
		nameEnd := align4(uint64(namesz))
		descEnd := nameEnd + align4(uint64(descsz))
		if nameEnd > uint64(len(d)) || descEnd > uint64(len(d)) {
			return nil
		}
		name := strings.TrimRight(string(d[:namesz]), "\x00")
		if name == owner && t == typ {
			return append([]byte(nil), d[nameEnd:nameEnd+uint64(descsz)]...)
		}
		d = d[descEnd:]
	}
	return nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// classifyDyn tells a PIE executable from a shared library. DF_1_PIE is
// authoritative; without it, an interpreter and no SONAME mean an
// executable (libc.so.6 has an interpreter and a SONAME).
func classifyDyn(f *elf.File) (pie, shared bool) {
	if f.Type != elf.ET_DYN {
		return false, false
	}
	if flags, err := f.DynValue(elf.DT_FLAGS_1); err == nil {
		for _, v := range flags {
			if v&uint64(elf.DF_1_PIE) != 0 {
				return true, false
			}
		}
	}
	hasInterp := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			hasInterp = true
		}
	}
	soname, _ := f.DynString(elf.DT_SONAME)
	if hasInterp && len(soname) == 0 {
		return true, false
	}
	return false, true
}

// contextExports checks how the two context entry points appear in the
// symbol tables: the agent reads otel_thread_ctx_v1 only from .dynsym and
// only as TLS; it attaches its uprobe to spanprof_set_trace_context from
// either table.
func contextExports(symtab, dynsyms []elf.Symbol) (threadCtx string, setFn bool) {
	defined := func(s elf.Symbol) bool { return s.Section != elf.SHN_UNDEF }
	for _, s := range dynsyms {
		switch {
		case s.Name == "otel_thread_ctx_v1" && defined(s):
			if elf.ST_TYPE(s.Info) == elf.STT_TLS {
				threadCtx = "ok"
			} else {
				threadCtx = fmt.Sprintf("otel_thread_ctx_v1 is in .dynsym as %v, not STT_TLS", elf.ST_TYPE(s.Info))
			}
		case s.Name == "spanprof_set_trace_context" && defined(s) && elf.ST_TYPE(s.Info) == elf.STT_FUNC:
			setFn = true
		}
	}
	for _, s := range symtab {
		switch {
		case s.Name == "otel_thread_ctx_v1" && defined(s) && threadCtx == "":
			threadCtx = "otel_thread_ctx_v1 is defined but not exported in .dynsym"
		case s.Name == "spanprof_set_trace_context" && defined(s) && elf.ST_TYPE(s.Info) == elf.STT_FUNC:
			setFn = true
		}
	}
	return threadCtx, setFn
}

// elasticExport reports whether .dynsym defines Elastic APM's
// correlation TLS variable, which the agent reads only from there.
func elasticExport(dynsyms []elf.Symbol) bool {
	for _, s := range dynsyms {
		if s.Name == tracectx.ElasticContextSymbol && s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			return true
		}
	}
	return false
}

// findDebugFile looks where gdb and debuginfod clients look: the build-ID
// tree first, then the debuglink next to the file, in .debug/, and under
// the debug root mirror of the file's directory.
func findDebugFile(opt elfOptions, info *elfInfo, dir string) string {
	root := opt.DebugRoot
	if root == "" {
		root = "/usr/lib/debug"
	}
	var cands []string
	if len(info.BuildID) >= 2 {
		h := hex.EncodeToString(info.BuildID)
		cands = append(cands, filepath.Join(root, ".build-id", h[:2], h[2:]+".debug"))
	}
	if info.DebugLink != "" && dir != "" && !strings.Contains(info.DebugLink, "/") {
		cands = append(cands,
			filepath.Join(dir, info.DebugLink),
			filepath.Join(dir, ".debug", info.DebugLink),
			filepath.Join(root, dir, info.DebugLink))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

// symbolsOf reads the .symtab of a separate debug file.
func symbolsOf(path string) ([]elf.Symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open debug file: %w", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("read debug symbols: %w", err)
	}
	return syms, nil
}
