package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// reportSymbolization puts the symbolization counters in the log, and
// rejected debug files and failed fetches on stderr as warnings.
func reportSymbolization(sym pipeline.Symbolization, s pipeline.Stats, log *slog.Logger) {
	st := s.Symbols
	if n := st.RejectedBuildID + st.RejectedCRC + st.RejectedCorrupt; n > 0 {
		log.Warn("debug files rejected", "build_id_mismatch", st.RejectedBuildID,
			"crc_mismatch", st.RejectedCRC, "corrupt", st.RejectedCorrupt)
	}
	log.Debug("symbolization", "mode", sym.Mode.String(), "objects", st.Parsed, "debug_files", st.DebugFiles,
		"debuginfod_files", st.DebuginfodFiles, "dwarf_errors", st.DWARFErrors)
	if d := s.Debuginfod; d != nil {
		if n := d.NotFound + d.Timeouts + d.HTTPError + d.Invalid + d.Dropped; n > 0 {
			log.Warn("debuginfod fetches failed", "not_found", d.NotFound, "timeouts", d.Timeouts,
				"http_errors", d.HTTPError, "invalid", d.Invalid, "dropped", d.Dropped)
		}
		log.Debug("debuginfod", "requested", d.Requested, "fetched", d.Fetched, "pending", d.Pending)
	}
}

// unnamedFrames are the frames of a profile left without symbols
// (profile.Unnamed): in how many samples and binaries, named how, and how
// many of them were named by their function's start in the unwind tables.
type unnamedFrames struct {
	samples, binaries    int
	names                string
	functions, addresses int
}

// reportUnnamed prints one line when frames of binaries lacked symbols
// or debug info: how many, how many of them were named by their
// function's start in the unwind tables, and what would name them.
func reportUnnamed(stderr io.Writer, sym pipeline.Symbolization, fetches bool, u unnamedFrames, debuginfodSet bool) {
	if sym.Mode == pipeline.ModeNone || u.samples == 0 {
		return
	}
	var hint string
	switch {
	case fetches:
		hint = "neither the debug directories nor debuginfod had their debug files"
	case debuginfodSet:
		hint = "--symbolize=local does not ask the debuginfod servers of DEBUGINFOD_URLS"
	default:
		hint = "install their debug packages (Debian: PACKAGE-dbgsym, into /usr/lib/debug, or --debug-dir DIR) or set DEBUGINFOD_URLS to fetch their debug files"
	}
	fmt.Fprintf(stderr, "spanprof: %d %s frames without symbols in %d %s (%s): %d %s named by %s start in .eh_frame (module+0xOFFSET), %d %s in none; %s\n",
		u.samples, plural(u.samples, "sample has", "samples have"), u.binaries, plural(u.binaries, "binary", "binaries"), u.names,
		u.functions, plural(u.functions, "function", "functions"), plural(u.functions, "its", "their"),
		u.addresses, plural(u.addresses, "address", "addresses"), hint)
}
