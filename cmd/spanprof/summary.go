package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// The causes of a recording's end other than an interrupt.
var (
	errDurationReached = errors.New("the recording's duration was reached")
	errCommandExited   = errors.New("the recorded command exited")
)

// reportStats says on stderr, from the pipeline's one snapshot after the
// recording, what the counters tell the user: processes gone before they
// could be read, pids reused, mappings captured at exits, trace context,
// attributes left out, stacks cut. Each line only when it has something
// to say.
func reportStats(w io.Writer, st pipeline.Stats) {
	if n := st.Tracker.Synthesized; n > 0 {
		fmt.Fprintf(w, "spanprof: %d processes were gone before /proc could be read; their executable and loader were placed from the exec\n", n)
	}
	if n := st.Tracker.Forked; n > 0 {
		fmt.Fprintf(w, "spanprof: %d pids were taken by a fork after their process exited; samples after the fork were symbolized against the new process\n", n)
	}
	reportExitMaps(w, st)
	reportPAC(w, st)
	if st.TraceContext != nil {
		reportTraceContext(w, st)
	}
	c := st.Collector
	if n := c.CtxAttrsUnnamed + c.CtxAttrsMalformed + c.CtxAttrsCut; n > 0 {
		fmt.Fprintf(w, "spanprof: thread-context attributes left out: %d unnamed by the process context's key map, %d samples with malformed attributes, %d samples past the bound on distinct attribute sets (their trace ids are kept)\n",
			c.CtxAttrsUnnamed, c.CtxAttrsMalformed, c.CtxAttrsCut)
	}
	if c.ImagesMissing > 0 {
		fmt.Fprintf(w, "spanprof: %d %s no process image to be symbolized against; their user frames stay addresses\n", c.ImagesMissing, plural(int(c.ImagesMissing), "stack had", "stacks had"))
	}
	if c.StacksCut > 0 {
		fmt.Fprintf(w, "spanprof: %d %s cut short: the frame-pointer chain went through code built without frame pointers (spanprof check names such binaries)\n", c.StacksCut, plural(int(c.StacksCut), "user stack was", "user stacks were"))
	}
	if c.UnwindCFIFrames > 0 || c.UnwindWindowCut > 0 || c.UnwindNoInfo > 0 || c.UnwindBadRule > 0 || c.UnwindBelowWindow > 0 || c.UnwindLinkFrames > 0 || c.UnwindBadLink > 0 {
		fmt.Fprintf(w, "spanprof: %d user frames of %d samples found by their unwind rules in code without frame pointers, %d in JIT code by its instructions or frame links; stacks cut: %d by the stack window (%d windows sized, %d widened), %d deeper than the window at frameless code, %d at code without unwind information, %d at rules not evaluated, %d at JIT frame links that failed their checks\n",
			c.UnwindCFIFrames, c.Samples, c.UnwindLinkFrames, c.UnwindWindowCut, c.WindowsSized, c.WindowsWidened, c.UnwindBelowWindow, c.UnwindNoInfo, c.UnwindBadRule, c.UnwindBadLink)
	}
	if c.ExitAwaited > 0 || c.ExitAwaitMissed > 0 {
		fmt.Fprintf(w, "spanprof: %d samples of processes gone before their libraries were read waited for the mappings captured at their exit; %d were unwound without them (no capture before a report, an exec or a fork, or the wait was full)\n",
			c.ExitAwaited, c.ExitAwaitMissed)
	}
	if c.PreExec > 0 {
		fmt.Fprintf(w, "spanprof: %d %s taken while a process was starting a new program (exec); %d were named after the program it ran before\n",
			c.PreExec, plural(int(c.PreExec), "sample was", "samples were"), c.PreExecAttributed)
	}
}

// reportPAC says how many arm64 return addresses kept their
// pointer-authentication code, where the mask was unknown.
func reportPAC(w io.Writer, st pipeline.Stats) {
	if n := st.Counters["pac_unstripped_frames"]; n > 0 {
		fmt.Fprintf(w, "spanprof: %d user frames kept their pointer-authentication code: the kernel's mask could not be read (a warning at start said why)\n", n)
	}
}

// reportExitMaps says what the mappings captured at exits added, and what
// they could not (docs/reliability.md, process churn).
func reportExitMaps(w io.Writer, st pipeline.Stats) {
	ex := st.Tracker.Exits
	if ex.Processes > 0 {
		fmt.Fprintf(w, "spanprof: %d exited processes got %d mappings (libraries, vDSO) from their exit\n", ex.Processes, ex.Mappings)
	}
	missed, dropped, untracked := st.Counters["exit_maps_missed"], st.Counters["exit_vmas_dropped"], st.Counters["exit_maps_untracked"]
	if ex.NoFile > 0 || missed+dropped+untracked > 0 {
		fmt.Fprintf(w, "spanprof: mappings of exited processes left out: %d exits not captured, %d mappings not in a capture, %d processes not tracked, %d files not found by their inode\n",
			missed, dropped, untracked, ex.NoFile)
	}
}

// reportTraceContext tells what the trace-context watcher found after
// the processes' start: libraries loaded late, process contexts
// republished, and what it could not read. Silent when none of it
// happened.
func reportTraceContext(w io.Writer, st pipeline.Stats) {
	s := st.TraceContext
	if s.LinkEvents > 0 || s.LoaderAttachErrors > 0 {
		fmt.Fprintf(w, "spanprof: trace context: %d library loads or unloads seen (%d before a first inspection), %d inspections after them found %d new context sources (%d failed); %d dynamic loaders watched, %d could not be (late loads in their processes not seen)\n",
			s.LinkEvents, s.LinkEventsEarly, s.LinkRescans, s.LinkFound, s.LinkScanErrors, s.LoadersAttached, s.LoaderAttachErrors)
	}
	if s.ContextUpdates > 0 || s.ContextCheckErrors > 0 {
		fmt.Fprintf(w, "spanprof: trace context: %d process-context updates read again (of %d checks, %d unreadable)\n",
			s.ContextUpdates, s.ContextChecks, s.ContextCheckErrors)
	}
	if s.ScanErrors > 0 || s.ScansDropped > 0 {
		fmt.Fprintf(w, "spanprof: trace context: %d of %d process inspections failed (most often the process was gone), %d not queued (queue full)\n",
			s.ScanErrors, s.Scanned, s.ScansDropped)
	}
}
