package check

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spanprof/spanprof/internal/tracectx"
)

// listLimit caps how many function names a message spells out; the JSON
// "functions" field keeps them all.
const listLimit = 12

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func nameList(names []string) string {
	if len(names) <= listLimit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, … and %d more", strings.Join(names[:listLimit], ", "), len(names)-listLimit)
}

// elfFindings turns an analysis into findings. standalone is true when the
// file was named on the command line rather than found mapped in a
// process, where trace-context publishing is judged for the process.
func elfFindings(info *elfInfo, target, path string, standalone bool) []Finding {
	var out []Finding
	add := func(f Finding) { out = append(out, f) }

	switch n := len(info.BuildID); {
	case n == 0:
		add(newFinding("build-id-missing", target, path, 0, "no .note.gnu.build-id: the agent cannot fetch symbols for this file by build ID"))
	case n != 20:
		add(newFinding("build-id-not-sha1", target, path, 0, "build ID %s is %d bytes, not a 20-byte sha1", hex.EncodeToString(info.BuildID), n))
	}

	fp := info.FP
	if len(fp.Missing) > 0 {
		f := newFinding("frame-pointer-missing", target, path, 0,
			"%d of %d functions set up no frame pointer although they call others: %s",
			len(fp.Missing), fp.Checked, nameList(fp.Missing))
		if info.Go {
			f.Fix = "build the cgo C code with CGO_CFLAGS=\"-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\""
		}
		f.Functions = fp.Missing
		add(f)
	}
	switch {
	case len(fp.LeafNoCFI) > 0:
		f := newFinding("leaf-frame-pointer", target, path, 0,
			"%d leaf %s (no call instruction) without a frame pointer or an unwind rule (.eh_frame): a sample there loses its caller: %s",
			len(fp.LeafNoCFI), plural(len(fp.LeafNoCFI), "function", "functions"), nameList(fp.LeafNoCFI))
		f.Fix = "build with clang, or keep the unwind tables (drop -fno-asynchronous-unwind-tables) so the unwinder recovers the caller"
		f.Functions = fp.LeafNoCFI
		add(f)
	case len(fp.Leaf) > 0:
		// The GCC 12 leaf problem with the recommended flags: what the
		// recording recovers is no violation (leafSeverity).
		f := newFinding("leaf-frame-pointer", target, path, 0,
			"%d leaf %s (no call instruction) set up no frame pointer; the unwinder recovers the caller from the unwind rules (.eh_frame): %s",
			len(fp.Leaf), plural(len(fp.Leaf), "function", "functions"), nameList(fp.Leaf))
		f.Severity, f.Fix = SevNote, ""
		f.Functions = fp.Leaf
		add(f)
	}

	switch {
	case info.Go:
	case info.FromFDE && info.FDECoverage < minFDECoverage:
		add(newFinding("frame-pointer-unverified", target, path, 0,
			"no function symbols, and the unwind tables (.eh_frame) delimit only %.0f%% of .text: the frame pointers of the rest cannot be verified",
			100*info.FDECoverage))
	case fp.Checked == 0:
		add(newFinding("frame-pointer-unverified", target, path, 0,
			"no function to check for frame pointers: no symbols in %s and no unwind tables (.eh_frame) to delimit the code", fp.Source))
	}
	if info.Stripped && !info.Go && info.DebugLink == "" && info.DebugFile == "" {
		add(newFinding("stripped-no-debuglink", target, path, 0,
			"no .symtab, no .gnu_debuglink and no /usr/lib/debug/.build-id debug file: only .dynsym names are left for symbolization"))
	}
	if info.ThreadCtx != "" && info.ThreadCtx != "ok" {
		add(newFinding("thread-ctx-not-exported", target, path, 0, "%s, so the agent cannot find it", info.ThreadCtx))
	}
	if standalone && !info.SharedLib && !info.publishesContext() {
		add(newFinding("binary-no-trace-context", target, path, 0,
			"exports neither otel_thread_ctx_v1 (TLS in .dynsym) nor spanprof_set_trace_context%s",
			map[bool]string{true: ", and does not import " + SDKModule, false: ""}[info.Go]))
	}

	add(newFinding("elf-summary", target, path, 0, "%s", summarize(info)))
	if len(fp.Toolchain) > 0 {
		f := newFinding("toolchain-functions", target, path, 0, "start-up code listed apart: %s", nameList(fp.Toolchain))
		f.Functions = fp.Toolchain
		add(f)
	}
	return out
}

func summarize(info *elfInfo) string {
	var parts []string
	switch {
	case info.SharedLib:
		parts = append(parts, "shared library")
	case info.PIE:
		parts = append(parts, "PIE executable")
	default:
		parts = append(parts, "executable (not PIE)")
	}
	if info.Go {
		parts = append(parts, "Go binary (Go functions keep frame pointers by default and are not prologue-checked)")
	}
	if len(info.BuildID) > 0 {
		parts = append(parts, "build ID "+hex.EncodeToString(info.BuildID))
	}
	fp := info.FP
	switch {
	case fp.Checked > 0 && info.FromFDE:
		parts = append(parts, fmt.Sprintf("%.1f%% of %d functions set up a frame pointer (%d without: %d calling, %d leaf; no symbols, functions delimited by .eh_frame, %.0f%% of .text)",
			100*fp.Share(), fp.Checked, fp.Checked-fp.WithFrame, len(fp.Missing), len(fp.Leaf), 100*info.FDECoverage))
	case fp.Checked > 0:
		parts = append(parts, fmt.Sprintf("%.1f%% of %d functions set up a frame pointer (%d without: %d calling, %d leaf; symbols from %s)",
			100*fp.Share(), fp.Checked, fp.Checked-fp.WithFrame, len(fp.Missing), len(fp.Leaf), fp.Source))
	case !info.Go && info.FromFDE:
		parts = append(parts, "no symbols, and no function with unwind tables (.eh_frame) to check frame pointers in")
	case !info.Go:
		parts = append(parts, "no function symbols to check frame pointers in ("+fp.Source+")")
	}
	if fp.GoFuncs > 0 {
		parts = append(parts, fmt.Sprintf("%d Go functions", fp.GoFuncs))
	}
	switch {
	case info.DebugFile != "":
		parts = append(parts, "stripped, symbols from debug file "+info.DebugFile)
	case info.Stripped && info.DebugLink != "":
		parts = append(parts, "stripped, debuglink "+info.DebugLink+" (not found locally)")
	case info.Stripped:
		parts = append(parts, "stripped")
	}
	if info.ThreadCtx == "ok" {
		parts = append(parts, "exports otel_thread_ctx_v1")
	}
	if info.ElasticCtx {
		parts = append(parts, "exports "+tracectx.ElasticContextSymbol)
	}
	if info.SetTraceCtxFn {
		parts = append(parts, "has spanprof_set_trace_context")
	}
	if info.GoSDK {
		parts = append(parts, "uses "+SDKModule)
	}
	return strings.Join(parts, "; ")
}
