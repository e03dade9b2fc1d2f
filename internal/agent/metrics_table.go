package agent

import (
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// metric is one row of the metric table: a metric /metrics serves, what
// docs/metrics.md says of it (generated from the table, TestMetricsDoc)
// and, for a metric read at scrape time, how it is read from the
// pipeline's snapshot.
type metric struct {
	name string
	kind metricKind
	// labels are the label names, in order.
	labels []string
	// help is the HELP text; doc, when set, says more in docs/metrics.md.
	help, doc string
	// read emits the metric's series from one snapshot, each with its
	// label values; nil for the metrics the agent counts as things happen
	// (Metrics), which the table only names and documents. A read that
	// emits nothing serves no series (a part that is off).
	read func(s *pipeline.Stats, emit func(v float64, labelValues ...string))
	// reasons, for the sampler's counters by reason, picks the counters
	// (by name) the metric exports, and the reason label of each.
	reasons func(counter string) (reason string, ok bool)
}

type metricKind int

const (
	counter metricKind = iota
	gauge
	histogram
)

func (k metricKind) String() string { return [...]string{"counter", "gauge", "histogram"}[k] }

func (k metricKind) valueType() prometheus.ValueType {
	if k == gauge {
		return prometheus.GaugeValue
	}
	return prometheus.CounterValue
}

// one is a read of one series without labels.
func one(v func(s *pipeline.Stats) float64) func(*pipeline.Stats, func(float64, ...string)) {
	return func(s *pipeline.Stats, emit func(float64, ...string)) { emit(v(s)) }
}

// collected reads a counter of the collector's.
func collected(v func(s *pipeline.Stats) uint64) func(*pipeline.Stats, func(float64, ...string)) {
	return one(func(s *pipeline.Stats) float64 { return float64(v(s)) })
}

// goWait reads a counter of the goroutine-wait sampler's, when it runs.
func goWait(v func(s *pipeline.Stats) uint64) func(*pipeline.Stats, func(float64, ...string)) {
	return func(s *pipeline.Stats, emit func(float64, ...string)) {
		if s.GoWait != nil {
			emit(float64(v(s)))
		}
	}
}

// traceContext reads a counter of the trace-context watcher's, when one
// counts.
func traceContext(v func(s *pipeline.Stats) uint64) func(*pipeline.Stats, func(float64, ...string)) {
	return func(s *pipeline.Stats, emit func(float64, ...string)) {
		if s.TraceContext != nil {
			emit(float64(v(s)))
		}
	}
}

// fetches reads a counter of the debuginfod client's, when servers are
// asked.
func fetches(v func(s *pipeline.Stats) uint64) func(*pipeline.Stats, func(float64, ...string)) {
	return func(s *pipeline.Stats, emit func(float64, ...string)) {
		if s.Debuginfod != nil {
			emit(float64(v(s)))
		}
	}
}

// counterKind sorts a sampler counter into the metric that exports it.
func counterKind(name string) (kind, reason string) {
	switch {
	case name == "samples":
		return "taken", ""
	case name == "offcpu_samples":
		return "offcpu", ""
	case name == "task_hash_full":
		return "task_hash_full", ""
	case strings.HasPrefix(name, "lost_"):
		return "lost", strings.TrimPrefix(name, "lost_")
	case strings.HasPrefix(name, "exit_"):
		return "exit", name
	}
	return "error", name
}

// byReason picks the sampler counters of kind, by their reason.
func byReason(kind string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		k, r := counterKind(name)
		return r, k == kind
	}
}

// sampled reads one sampler counter without a reason.
func sampled(name string) func(*pipeline.Stats, func(float64, ...string)) {
	return func(s *pipeline.Stats, emit func(float64, ...string)) {
		if v, ok := s.Counters[name]; ok {
			emit(float64(v))
		}
	}
}

const (
	evictedHelp  = "Parsed binaries evicted from the cache, by reason: bound (the count or byte bound, or parsed again once a debug file arrived) or idle (unused for the idle timeout)."
	jvmReqHelp   = "Requests to JVMs to write their perf map (HotSpot attach, Compiler.perfmap), by result: ok, failed (no attach listener, timeout, a JVM without the command), or exited (the JVM was gone when asked)."
	unwindEvHelp = "Unwind tables evicted from the cache, by reason: bound (the unwind part of the symbol cache budget, or the count bound) or idle (unused for the idle timeout). An evicted table is read again when a sample needs it."
	attrsHelp    = "Thread-context attributes (unnamed) or samples' attribute sets (malformed, cardinality) left out of the profile; the samples keep their trace ids."
)

// metrics is the metric table: every metric of the agent, in the order
// of docs/metrics.md. A metric of a new counter is a row here (and a
// field of pipeline.Stats when a stage counts it); `go test
// ./internal/agent -run TestMetricsDoc -update` writes the doc again.
var metrics = []metric{
	// The sampler.
	{name: "spanprof_samples_taken_total", kind: counter, help: "Samples the eBPF program took.", read: sampled("samples")},
	{name: "spanprof_offcpu_samples_taken_total", kind: counter, help: "Off-CPU waits the eBPF program captured.",
		doc: "off-CPU waits the eBPF program captured (before, the `offcpu_samples` reason of `spanprof_sample_errors_total`)", read: sampled("offcpu_samples")},
	{name: "spanprof_samples_lost_total", kind: counter, labels: []string{"reason"}, help: "Samples that never reached a profile, by reason",
		doc: "samples that never reached a profile: `ringbuf_full`, `queue_full` (user-space hand-off), `decode`, `proc_events`, `proc_events_queue_full` (process events, not samples), `offcpu_pending_full`, `offcpu_no_state`; the HELP text lists the reasons of the running sampler", reasons: byReason("lost")},
	{name: "spanprof_sample_errors_total", kind: counter, labels: []string{"reason"}, help: "Samples kept with a part missing (stack or context read failed), by reason",
		doc: "samples kept with a part missing: `user_stack_error`, `kernel_stack_error`, `stack_top_read_error`, `context_read_error`, `context_invalid`, `go_labels_error`, `context_attrs_read_error`, `node_context_walk_error`", reasons: byReason("error")},
	{name: "spanprof_task_hash_full_total", kind: counter, help: "Times a thread found a per-thread hash map full (the compat object, on kernels without task storage for tracing programs: Linux 5.10): its span context set by uprobe, or its off-CPU cycle, was not kept.",
		doc: "times a thread found a per-thread hash map of the compat object full (Linux 5.10, no task storage for tracing programs): its span context set through `spanprof_set_trace_context` or its off-CPU cycle was not kept (an off-CPU wait so lost is also `offcpu_no_state`); 0 with the default object", read: sampled("task_hash_full")},
	{name: "spanprof_exit_mappings_missing_total", kind: counter, labels: []string{"reason"}, help: "Mappings of exited processes not captured at their exit, so their samples may keep unnamed frames, by reason",
		doc: "mappings of exited processes not captured at their exit (their samples may keep unnamed library frames): `exit_maps_missed` (processes: no mm left, VMA iterator busy, ring full), `exit_vmas_dropped` (mappings past the record's room), `exit_maps_untracked` (processes: flag map full)", reasons: byReason("exit")},

	// The process table and the collector.
	{name: "spanprof_processes_tracked", kind: gauge, help: "Processes whose mappings the agent holds.",
		doc:  "processes whose mappings are held; climbs between reports with every process that starts, and falls at each report as the exited ones are dropped",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.Tracker.Tracked) })},
	{name: "spanprof_processes_retained", kind: gauge, help: "Processes still tracked after the last report dropped the exited ones: the floor under spanprof_processes_tracked, which climbs between reports with every process that starts.",
		doc:  "processes still tracked right after the last report: the floor of the sawtooth above, the one to watch for a leak",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.Retained) })},
	{name: "spanprof_samples_collected_total", kind: counter, help: "Samples that reached the collector from the sampler.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.Samples })},
	{name: "spanprof_samples_filtered_total", kind: counter, help: "Samples of processes outside the configured executables, discarded by design.",
		doc:  "samples of processes outside `processes.executables`, discarded by design",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Filtered })},
	{name: "spanprof_context_attributes_dropped_total", kind: counter, labels: []string{"reason"}, help: attrsHelp,
		doc: "thread-context attributes left out of the profile: `unnamed` (attributes whose key the process context's key map does not name), `malformed` (samples whose attributes did not parse), `cardinality` (samples past the bound on distinct attribute sets per report); the samples keep their trace ids",
		read: func(s *pipeline.Stats, emit func(float64, ...string)) {
			emit(float64(s.Collector.CtxAttrsUnnamed), "unnamed")
			emit(float64(s.Collector.CtxAttrsMalformed), "malformed")
			emit(float64(s.Collector.CtxAttrsCut), "cardinality")
		}},
	{name: "spanprof_user_stacks_cut_total", kind: counter, help: "Samples whose user stack ended at a return address in no code mapping: the frame-pointer chain went through code built without frame pointers, and the rest was not a stack.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.StacksCut })},
	{name: "spanprof_unwind_cfi_frames_total", kind: counter, help: "User frames found by their CFA rules (.eh_frame, .debug_frame, Go tables) in the stack window, where the frame-pointer walk skipped or invented callers.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindCFIFrames })},
	{name: "spanprof_unwind_window_cut_total", kind: counter, help: "User stacks cut because a frame lay beyond the stack window the kernel copied; the process's window is widened for the next samples (spanprof_stack_windows_widened_total).",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindWindowCut })},
	{name: "spanprof_unwind_below_window_total", kind: counter, help: "User stacks deeper than the stack window that end at frameless code (usually the C library's frames under main or start_thread) below frames the kernel walked beyond the window.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindBelowWindow })},
	{name: "spanprof_unwind_no_info_total", kind: counter, help: "User stacks ending at an address with no unwind rule whose frame pointer the kernel did not walk from: code without .eh_frame or frame pointers.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindNoInfo })},
	{name: "spanprof_unwind_bad_rule_total", kind: counter, help: "User stacks ending at a CFA rule the unwinder cannot evaluate (a DWARF expression, the frame pointer in another register).",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindBadRule })},
	{name: "spanprof_unwind_link_frames_total", kind: counter, help: "User frames found by following the frame pointer of JIT code (CPython's perf trampolines, compiled Java methods) off the kernel's frame-pointer chain.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindLinkFrames })},
	{name: "spanprof_unwind_bad_link_total", kind: counter, help: "User stacks ending at JIT code whose frame pointer was not a frame link (below the stack pointer, misaligned, or its return address into no code).",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.UnwindBadLink })},
	{name: "spanprof_stack_windows_widened_total", kind: counter, help: "Times a process's stack window was widened after the window cut one of its stacks.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.WindowsWidened })},
	{name: "spanprof_stack_windows_sized_total", kind: counter, help: "Processes whose stack window was sized from what the walks of their first second of samples needed (copied with the widest window until then).",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.WindowsSized })},
	{name: "spanprof_stack_windows_unset_total", kind: counter, help: "Stack window sizes the kernel's map did not take (full): those processes keep the window they had, the widest for a process never sized.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.WindowsUnset })},
	{name: "spanprof_pids_reused_by_fork_total", kind: counter, help: "Pids taken by a new process (its fork event) after the pid's process exited; samples after the fork were symbolized against the new process.",
		doc:  "pids taken by a new process (its fork event) after the pid's process exited: samples after the fork were symbolized against the new process, which runs its parent's image until it execs",
		read: collected(func(s *pipeline.Stats) uint64 { return uint64(s.Tracker.Forked) })},
	{name: "spanprof_samples_awaited_exit_total", kind: counter, labels: []string{"outcome"},
		help: "Samples of processes gone before their libraries were read, whose stacks waited for the mappings the kernel captured at their exit: unwound with them (captured) or without (missed: no capture before a report, an exec or a fork of the pid, or the wait was full).",
		doc:  "samples of processes gone before their libraries were read, whose stacks waited for the mappings the kernel captured at their exit: `captured` (unwound with them), `missed` (unwound without: no capture before a report, an exec or a fork of the pid, or the wait, 2 MiB of records, was full)",
		read: func(s *pipeline.Stats, emit func(float64, ...string)) {
			emit(float64(s.Collector.ExitAwaited), "captured")
			emit(float64(s.Collector.ExitAwaitMissed), "missed")
		}},
	{name: "spanprof_pre_exec_samples_total", kind: counter, help: "Samples taken inside an exec, before the new image's registers were set, that were symbolized against the image before the exec (the process as read before it, else its parent's, which a posix_spawn child runs in).",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.PreExecAttributed })},
	{name: "spanprof_images_missing_total", kind: counter, help: "Stacks whose process image was not there to symbolize them against at the report (never expected: each kept sample holds its image); their user frames stay addresses.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.ImagesMissing })},

	// Symbolization.
	{name: "spanprof_symbolize_objects_parsed_total", kind: counter, help: "Binaries whose symbol tables were parsed.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Symbols.Parsed })},
	{name: "spanprof_symbolize_objects_evicted_total", kind: counter, labels: []string{"reason"}, help: evictedHelp,
		read: func(s *pipeline.Stats, emit func(float64, ...string)) {
			emit(float64(s.Symbols.Evicted-s.Symbols.Expired), "bound")
			emit(float64(s.Symbols.Expired), "idle")
		}},
	{name: "spanprof_symbolize_samples_deferred_total", kind: counter, help: "Samples a report left for a later one because their stack needed a binary beyond the report's parse bound (symbolization.cache_mib/8 of new tables per report); counted once per report they waited. Their addresses are kept and named when the binary is parsed.",
		doc:  "samples a report left for a later one because their stack needed a binary not parsed yet beyond the report's parse bound (an eighth of `symbolization.cache_mib` of new tables per report), counted once per report they waited: kept with their addresses, never named otherwise, and exported by the report that parses their binary (at most 6 reports later; the last report takes all)",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.Deferred })},
	{name: "spanprof_symbolize_samples_waiting", kind: gauge, help: "Samples kept now that waited for a binary's parse at the last report.",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.Collector.Waiting) })},
	{name: "spanprof_symbolize_samples_forced_total", kind: counter, help: "Samples symbolized past the parse bound after their stack waited 6 reports.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Collector.Forced })},
	{name: "spanprof_symbolize_debug_files_total", kind: counter, help: "Separate debug files used.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Symbols.DebugFiles })},
	{name: "spanprof_symbolize_dwarf_loads_total", kind: counter, help: "Loads of DWARF section data: one per binary with DWARF, plus one per report that met a compile unit not seen since the data was released.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.Symbols.DWARFLoads })},
	{name: "spanprof_symbolize_debug_files_rejected_total", kind: counter, help: "Debug files refused (build ID or CRC mismatch, corrupt).",
		read: collected(func(s *pipeline.Stats) uint64 {
			return s.Symbols.RejectedBuildID + s.Symbols.RejectedCRC + s.Symbols.RejectedCorrupt
		})},
	{name: "spanprof_symbolize_cache_bytes", kind: gauge, help: "Bytes held by parsed symbol tables, counting the Go pclntabs shared with the unwind tables when the symbol cache pays for them.",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.SymbolBytes) })},
	{name: "spanprof_symbolize_mapped_bytes", kind: gauge, help: "Address space of the binaries' sections mapped from their files rather than read onto the heap (Go pclntabs, .eh_frame and .eh_frame_hdr, symbol tables while read); only the pages touched since the last report are resident.",
		doc:  "address space of the sections mapped from the binaries rather than read onto the heap: Go pclntabs and `.eh_frame` with `.eh_frame_hdr` while cached, `.symtab` and `.dynsym` while read. Not charged to the symbol budget: the resident part is the pages touched since the last report, which every report drops (docs/symbolization.md, \"The budget\")",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.MappedBytes) })},
	{name: "spanprof_symbolize_mapped_read_faults_total", kind: counter, help: "Reads of a mapped section that faulted (its file truncated or rewritten in place under the mapping); each answered not found, its frame left unnamed.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.MappedFaults })},
	{name: "spanprof_debuginfod_fetched_total", kind: counter, help: "Debug files downloaded.",
		doc:  "debug files downloaded from debuginfod (served when symbolization asks debuginfod servers: mode full with URLs)",
		read: fetches(func(s *pipeline.Stats) uint64 { return s.Debuginfod.Fetched })},
	{name: "spanprof_debuginfod_failed_total", kind: counter, help: "Fetches that failed (not found, timeout, HTTP error, invalid, dropped).",
		doc: "debuginfod fetches that failed: not found, timeout, HTTP error, invalid (a file that is not the binary's debug file), dropped (the fetch queue was full); served with the metric above",
		read: fetches(func(s *pipeline.Stats) uint64 {
			d := s.Debuginfod
			return d.NotFound + d.Timeouts + d.HTTPError + d.Invalid + d.Dropped
		})},
	{name: "spanprof_unwind_tables_evicted_total", kind: counter, labels: []string{"reason"}, help: unwindEvHelp,
		read: func(s *pipeline.Stats, emit func(float64, ...string)) {
			emit(float64(s.UnwindEvictedBound), "bound")
			emit(float64(s.UnwindEvictedIdle), "idle")
		}},
	{name: "spanprof_unwind_tables_cache_bytes", kind: gauge, help: "Bytes held by the unwind tables, counting the Go pclntabs shared with the symbolizer when this cache pays for them.",
		read: one(func(s *pipeline.Stats) float64 { return float64(s.UnwindBytes) })},

	// JIT code.
	{name: "spanprof_jvm_perfmap_requests_total", kind: counter, labels: []string{"result"}, help: jvmReqHelp,
		doc: "requests to JVMs to write their perf map: `ok`, `failed` (no attach listener, timeout, a JVM without `Compiler.perfmap`; a JVM that cannot be attached is not asked again), or `exited` (the JVM was gone when asked, before its exit event was handled); all 0 with `no_jvm_perfmap`",
		read: func(s *pipeline.Stats, emit func(float64, ...string)) {
			emit(float64(s.JVMs.Attaches), "ok")
			emit(float64(s.JVMs.Failures), "failed")
			emit(float64(s.JVMs.Exited), "exited")
		}},
	{name: "spanprof_jvm_perfmap_rate_limited_total", kind: counter, help: "Scheduled requests to JVMs not made because the JVM was asked less than 5s before.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.JVMs.Skipped })},
	{name: "spanprof_jvm_perfmap_seconds_total", kind: counter, help: "Time spent attaching to JVMs and waiting for them to write their perf maps.",
		read: one(func(s *pipeline.Stats) float64 { return s.JVMs.Time.Seconds() })},
	{name: "spanprof_perf_map_reads_total", kind: counter, help: "JIT perf map files (/tmp/perf-PID.map) read or re-read after they changed.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.PerfMaps.Reads })},
	{name: "spanprof_perf_map_bad_lines_total", kind: counter, help: "Lines of perf map files that did not parse and were skipped.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.PerfMaps.BadLines })},
	{name: "spanprof_jitdump_malformed_total", kind: counter, help: "Reads of jitdump files (/tmp/jit-PID.dump, read for processes without a perf map) that found the header or a record malformed; the records before a bad one are kept.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.PerfMaps.BadDumps })},
	{name: "spanprof_perf_map_kept_entries_total", kind: counter, help: "Entries of earlier versions of rewritten perf maps (a JVM's) kept because no new entry covers their code.",
		read: collected(func(s *pipeline.Stats) uint64 { return s.PerfMaps.Kept })},

	// Trace context (served when the watcher runs).
	{name: "spanprof_tracectx_scans_total", kind: counter, help: "Processes inspected for a trace-context source.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.Scanned })},
	{name: "spanprof_tracectx_configured_total", kind: counter, help: "Processes whose trace-context source was configured in the kernel.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.Configured })},
	{name: "spanprof_tracectx_scan_errors_total", kind: counter, help: "Process inspections that failed.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.ScanErrors })},
	{name: "spanprof_tracectx_hooks_attached_total", kind: counter, help: "spanprof_set_trace_context uprobes attached.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.HooksAttached })},
	{name: "spanprof_tracectx_rescans_unchanged_total", kind: counter, help: "Rescans (among the inspections) that stopped at the maps, which read as at an inspection that found no source.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.Unchanged })},
	{name: "spanprof_tracectx_scans_dropped_total", kind: counter, help: "Inspections not queued: the watcher's queue was full.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.ScansDropped })},
	{name: "spanprof_tracectx_loaders_attached_total", kind: counter, help: "Dynamic loader files whose link-map changes (dlopen, dlclose) are watched.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LoadersAttached })},
	{name: "spanprof_tracectx_loader_attach_errors_total", kind: counter, help: "Dynamic loader files whose hook could not be watched: their processes' late library loads are not seen.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LoaderAttachErrors })},
	{name: "spanprof_tracectx_link_events_total", kind: counter, help: "Link-map changes (a library loaded or unloaded) the kernel reported.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LinkEvents })},
	{name: "spanprof_tracectx_link_events_early_total", kind: counter, help: "Link-map changes of processes not inspected yet, left to their first inspection.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LinkEventsEarly })},
	{name: "spanprof_tracectx_link_rescans_total", kind: counter, help: "Inspections (among the scans) asked for by a link-map change, at once or as a retry after it.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LinkRescans })},
	{name: "spanprof_tracectx_link_found_total", kind: counter, help: "Inspections after a link-map change that found a context source or process context not configured before.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LinkFound })},
	{name: "spanprof_tracectx_link_rescan_errors_total", kind: counter, help: "Inspections after a link-map change that failed.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.LinkScanErrors })},
	{name: "spanprof_tracectx_context_checks_total", kind: counter, help: "Reads of a known process context's header, to tell an update.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.ContextChecks })},
	{name: "spanprof_tracectx_context_updates_total", kind: counter, help: "Process contexts found republished, whose process was inspected again.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.ContextUpdates })},
	{name: "spanprof_tracectx_context_check_errors_total", kind: counter, help: "Process-context header reads that failed (the mapping gone): the process was inspected again.",
		read: traceContext(func(s *pipeline.Stats) uint64 { return s.TraceContext.ContextCheckErrors })},

	// Goroutine waits (served with off_cpu and a go_wait_frequency).
	{name: "spanprof_go_wait_ticks_total", kind: counter, help: "Goroutine-wait sampler ticks.",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.Ticks })},
	{name: "spanprof_go_wait_samples_total", kind: counter, help: "Parked goroutines observed.",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.Samples })},
	{name: "spanprof_go_wait_held_total", kind: counter, help: "Observations of late ticks weighted by the whole gap (parked unchanged since the previous tick).",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.Held })},
	{name: "spanprof_go_wait_uncovered_ns_total", kind: counter, help: "Waiting time late ticks could not attribute to goroutines that parked during the gap.",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.UncoveredNs })},
	{name: "spanprof_go_wait_dropped_total", kind: counter, help: "Parked goroutines read but not sampled: torn, changed while read, unreadable, or labels unreadable.",
		read: goWait(func(s *pipeline.Stats) uint64 {
			g := s.GoWait
			return g.DroppedInvalid + g.DroppedChanged + g.DroppedUnreadable + g.DroppedLabels
		})},
	{name: "spanprof_go_wait_tick_errors_total", kind: counter, help: "Whole-process reads that failed.",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.TickErrors })},
	{name: "spanprof_go_wait_backlog_dropped_total", kind: counter, help: "Goroutine-wait records of ticks dropped because the consumer had not taken the ticks of the last gowait.BacklogTime (3 s).",
		read: goWait(func(s *pipeline.Stats) uint64 { return s.GoWait.DroppedBacklog })},

	// Reports and their export, counted as they happen (Metrics).
	{name: "spanprof_build_info", kind: gauge, labels: []string{"version", "revision", "goversion"}, help: "Always 1; the labels name the running build (version, VCS revision, Go version)."},
	{name: "spanprof_reports_total", kind: counter, help: "Profiles built (one per report interval with samples)."},
	{name: "spanprof_report_samples_total", kind: counter, help: "Samples put into built profiles."},
	{name: "spanprof_report_build_seconds", kind: histogram, help: "Time to symbolize and build one profile."},
	{name: "spanprof_report_bytes", kind: histogram, help: "Encoded (uncompressed) size of one report, what the queue holds per batch."},
	{name: "spanprof_export_requests_total", kind: counter, labels: []string{"endpoint", "result"}, help: "OTLP export attempts by endpoint and result (success or the gRPC code)."},
	{name: "spanprof_export_duration_seconds", kind: histogram, labels: []string{"endpoint"}, help: "Latency of OTLP export attempts."},
	{name: "spanprof_export_batches_total", kind: counter, labels: []string{"endpoint"}, help: "Batches the collector accepted."},
	{name: "spanprof_export_samples_total", kind: counter, labels: []string{"endpoint"}, help: "Samples (events) in batches the collector accepted."},
	{name: "spanprof_export_rejected_profiles_total", kind: counter, labels: []string{"endpoint"}, help: "Profiles the collector reported as rejected in a partial success."},
	{name: "spanprof_export_queue_length", kind: gauge, labels: []string{"endpoint"}, help: "Batches waiting to be sent, not counting the one in flight."},
	{name: "spanprof_export_queue_bytes", kind: gauge, labels: []string{"endpoint"}, help: "Encoded size of the batches waiting to be sent, not counting the one in flight.",
		doc: "encoded size of the batches waiting to be sent, not counting the one in flight (bounded by `queue_mib`)"},
	{name: "spanprof_export_dropped_batches_total", kind: counter, labels: []string{"endpoint", "reason"}, help: "Batches never delivered, by reason (" + strings.Join(dropReasons, ", ") + ")."},
	{name: "spanprof_export_dropped_samples_total", kind: counter, labels: []string{"endpoint", "reason"}, help: "Samples in batches never delivered, by reason (" + strings.Join(dropReasons, ", ") + ")."},
}

// row is the table's row of name; a name not in the table is a bug of
// the one who added the metric, caught by the first NewMetrics.
func row(name string) metric {
	for _, m := range metrics {
		if m.name == name {
			return m
		}
	}
	panic("metric " + name + " is not in the metric table (metrics_table.go)")
}

func counterOpts(name string) prometheus.CounterOpts {
	r := row(name)
	return prometheus.CounterOpts{Name: r.name, Help: r.help}
}

func gaugeOpts(name string) prometheus.GaugeOpts {
	r := row(name)
	return prometheus.GaugeOpts{Name: r.name, Help: r.help}
}

func histogramOpts(name string, buckets []float64) prometheus.HistogramOpts {
	r := row(name)
	return prometheus.HistogramOpts{Name: r.name, Help: r.help, Buckets: buckets}
}

func counterVec(name string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(counterOpts(name), row(name).labels)
}

func gaugeVec(name string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(gaugeOpts(name), row(name).labels)
}

func histogramVec(name string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(histogramOpts(name, buckets), row(name).labels)
}

// statsCollector is the one Prometheus collector of the metrics read at
// scrape time: it takes one snapshot of the pipeline per scrape and
// serves every row of the table that reads it.
type statsCollector struct {
	stats func() pipeline.Stats
	descs map[string]*prometheus.Desc
	rows  []metric
	// last is the last snapshot's sampler counters that were read: a
	// closed sampler cannot be read, and its counters must not go back.
	mu   sync.Mutex
	last map[string]uint64
}

// newStatsCollector reads the snapshot once to name, in the HELP texts of
// the sampler's counters by reason, the reasons the sampler has.
func newStatsCollector(stats func() pipeline.Stats) *statsCollector {
	first := stats()
	c := &statsCollector{stats: stats, descs: map[string]*prometheus.Desc{}}
	for _, m := range metrics {
		if m.read == nil && m.reasons == nil {
			continue
		}
		help := m.help
		if m.reasons != nil {
			var rs []string
			for k := range first.Counters {
				if r, ok := m.reasons(k); ok {
					rs = append(rs, r)
				}
			}
			if len(rs) > 0 {
				sort.Strings(rs)
				help += " (" + strings.Join(rs, ", ") + ")"
			}
			help += "."
		}
		c.descs[m.name] = prometheus.NewDesc(m.name, help, m.labels, nil)
		c.rows = append(c.rows, m)
	}
	return c
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.rows {
		ch <- c.descs[m.name]
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	c.mu.Lock()
	if s.CountersErr != nil && len(s.Counters) == 0 {
		s.Counters = c.last
	} else {
		c.last = s.Counters
	}
	c.mu.Unlock()
	names := make([]string, 0, len(s.Counters))
	for k := range s.Counters {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, m := range c.rows {
		d, t := c.descs[m.name], m.kind.valueType()
		if m.reasons != nil {
			for _, k := range names {
				if r, ok := m.reasons(k); ok {
					ch <- prometheus.MustNewConstMetric(d, t, float64(s.Counters[k]), r)
				}
			}
			continue
		}
		m.read(&s, func(v float64, lv ...string) { ch <- prometheus.MustNewConstMetric(d, t, v, lv...) })
	}
}
