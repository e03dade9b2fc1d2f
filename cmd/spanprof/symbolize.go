package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// symbolization is the pipeline's symbols and what `record` does with
// them at the end: wait for debuginfod, report.
type symbolization struct {
	*pipeline.Symbols
	wait time.Duration // --debuginfod-wait
}

// prepare requests the debug files the samples need and waits, up to
// --debuginfod-wait, for the fetches to end. Frames of objects still
// waiting keep module, offset and build ID, for a backend to resolve.
func (s *symbolization) prepare(ctx context.Context, c *collect.Collector, stderr io.Writer) {
	if s.Debuginfod == nil {
		return
	}
	c.Prepare()
	if s.Debuginfod.Pending() == 0 || s.wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	left := s.Debuginfod.Wait(ctx, func(n int) {
		fmt.Fprintf(stderr, "spanprof: waiting for %d debug file(s) from debuginfod\n", n)
	})
	if left > 0 {
		fmt.Fprintf(stderr, "spanprof: %d debug file(s) still being fetched after %v; their frames stay module+offset\n", left, s.wait)
	}
}

// report puts the symbolization counters in the log, and rejected debug
// files and failed fetches on stderr as warnings.
func (s *symbolization) report(log *slog.Logger) {
	st := s.Symbolizer.Stats()
	if n := st.RejectedBuildID + st.RejectedCRC + st.RejectedCorrupt; n > 0 {
		log.Warn("debug files rejected", "build_id_mismatch", st.RejectedBuildID,
			"crc_mismatch", st.RejectedCRC, "corrupt", st.RejectedCorrupt)
	}
	log.Debug("symbolization", "mode", s.Mode.String(), "objects", st.Parsed, "debug_files", st.DebugFiles,
		"debuginfod_files", st.DebuginfodFiles, "dwarf_errors", st.DWARFErrors)
	if s.Debuginfod != nil {
		d := s.Debuginfod.Stats()
		if n := d.NotFound + d.Timeouts + d.HTTPError + d.Invalid + d.Dropped; n > 0 {
			log.Warn("debuginfod fetches failed", "not_found", d.NotFound, "timeouts", d.Timeouts,
				"http_errors", d.HTTPError, "invalid", d.Invalid, "dropped", d.Dropped)
		}
		log.Debug("debuginfod", "requested", d.Requested, "fetched", d.Fetched, "pending", d.Pending)
	}
}

// reportUnnamed prints one line when frames of binaries lacked symbols
// or debug info: how many, how many of them were named by their
// function's start in the unwind tables, and what would name them.
func (s *symbolization) reportUnnamed(stderr io.Writer, u profile.Unnamed, debuginfodSet bool) {
	if s.Mode == symbolize.ModeNone || u.Samples == 0 {
		return
	}
	var hint string
	switch {
	case s.Debuginfod != nil:
		hint = "neither the debug directories nor debuginfod had their debug files"
	case debuginfodSet:
		hint = "--symbolize=local does not ask the debuginfod servers of DEBUGINFOD_URLS"
	default:
		hint = "install their debug packages (Debian: PACKAGE-dbgsym, into /usr/lib/debug, or --debug-dir DIR) or set DEBUGINFOD_URLS to fetch their debug files"
	}
	fmt.Fprintf(stderr, "spanprof: %d %s frames without symbols in %d %s (%s): %d %s named by %s start in .eh_frame (module+0xOFFSET), %d %s in none; %s\n",
		u.Samples, plural(u.Samples, "sample has", "samples have"), len(u.Objects), plural(len(u.Objects), "binary", "binaries"), u,
		u.Functions, plural(u.Functions, "function", "functions"), plural(u.Functions, "its", "their"),
		u.Addresses, plural(u.Addresses, "address", "addresses"), hint)
}
