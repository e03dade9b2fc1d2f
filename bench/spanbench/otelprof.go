package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanprof/spanprof/internal/sampler"
)

// otelDefault is where make bench-deps builds the OpenTelemetry eBPF
// profiler (OTEL_EBPF_PROFILER in the Makefile).
const otelDefault = "out/peers/ebpf-profiler"

// otelReady is what the profiler logs once its sampling program is
// attached to the CPU-clock events (internal/controller); its samples are
// not yet unwound then (otelWindow).
const otelReady = "Attached tracer program"

// otelRow is one window of spanprof and the OpenTelemetry eBPF profiler
// sampling the same workload at the same time.
type otelRow struct {
	workload       string
	round          int
	spanprof, otel progStat
	// exports is how many OTLP export requests the sink got from the
	// profiler in the window.
	exports int64
}

func (r otelRow) ratio() float64 {
	if r.otel.nsPerRun() == 0 {
		return 0
	}
	return r.spanprof.nsPerRun() / r.otel.nsPerRun()
}

// otelPeer is the OpenTelemetry eBPF profiler of the per-sample phase.
type otelPeer struct {
	version string // what -version prints
	// notMeasured says why it was not run at all; failed, why it was
	// not run after a failed window.
	notMeasured, failed string
	rows                []otelRow
	sink                *sink
	self                string // spanbench's executable: the seccomp launcher
}

func (o *otelPeer) measuring() bool { return o.notMeasured == "" && o.failed == "" }

// otelPrepare checks the profiler's binary and starts the OTLP sink it
// exports to (it will not load its eBPF before it has connected to one).
// Without a binary it records why in b.otel.notMeasured.
func (b *bench) otelPrepare() (stop func()) {
	o := &b.otel
	stop = func() {}
	if b.otelBin == "" {
		o.notMeasured = `disabled (-otel-profiler "")`
		return stop
	}
	rel := b.otelBin
	if r, err := filepath.Rel(b.root, b.otelBin); err == nil && !strings.HasPrefix(r, "..") {
		rel = r
	}
	if _, err := os.Stat(b.otelBin); err != nil {
		o.notMeasured = fmt.Sprintf("%s not found (make bench-deps builds it)", rel)
		if log, err := os.ReadFile(b.otelBin + ".build.log"); err == nil {
			o.notMeasured = fmt.Sprintf("%s not found: make bench-deps failed to build it: %s", rel, lastLine(string(log)))
		}
		return stop
	}
	out, err := exec.Command(b.otelBin, "-version").CombinedOutput()
	if err != nil {
		o.notMeasured = fmt.Sprintf("%s -version: %v: %s", rel, err, lastLine(string(out)))
		return stop
	}
	o.version = lastLine(string(out))
	if o.self, err = os.Executable(); err != nil {
		o.notMeasured = fmt.Sprintf("spanbench's own executable, the launcher: %v", err)
		return stop
	}
	if o.sink, err = startSink(); err != nil {
		o.notMeasured = fmt.Sprintf("OTLP sink: %v", err)
		return stop
	}
	return o.sink.stop
}

// otelWindow runs the profiler beside the spanprof sp already attached to
// the workload and measures both over one window of sideWindow.
func (b *bench) otelWindow(w sideWorkload, round int, sp *proc, work []*proc) (otelRow, error) {
	o := &b.otel
	row := otelRow{workload: w.name, round: round}
	// The profiler attaches tracepoints and finds their ids in tracefs.
	if _, err := sampler.EnsureTracefs(); err != nil {
		return row, err
	}
	// Through spanbench -seccomp-rlimit-exec (seccomp.go): root here may
	// lack CAP_SYS_RESOURCE, and the profiler exits when it cannot raise
	// RLIMIT_MEMLOCK.
	// -v: its debug log says when it has added a process (below).
	p, err := start(o.self, seccompRlimitFlag, "--", b.otelBin, "-collection-agent", o.sink.addr, "-disable-tls",
		"-samples-per-second", "999", "-off-cpu-threshold", "0", "-v")
	if err != nil {
		return row, err
	}
	// It stops its tracer and flushes on SIGTERM, in well under a second.
	defer p.stop(syscall.SIGTERM, 30*time.Second)
	// Several seconds: it reads the kernel's symbols and offsets first.
	if err := p.waitFor(otelReady, 60*time.Second); err != nil {
		return row, err
	}
	// Its samples of a process cost little (about 2 µs here, against
	// some 55 µs after) until it has read the process's mappings and
	// loaded their unwind tables into its maps, some seconds after it
	// attached (about 5 s here). Wait until it has added every workload
	// process: a window before would measure its start-up, not its
	// sampling. In the short-lived workload these are the shell loops;
	// each of their children it adds as they come, as on such a node.
	for _, wp := range work {
		if err := p.waitFor(fmt.Sprintf("+ PID: %d\"", wp.pid()), 60*time.Second); err != nil {
			return row, fmt.Errorf("workload process not added: %w", err)
		}
	}
	time.Sleep(settle) // as every profiler of the phase
	// native_tracer_entry, the perf_event program; the unwinders it
	// tail-calls (perf_unwind_*, also perf_event) never count runs of
	// their own, their time counts in the entry's. Its tracepoint
	// programs (process exit, prctl) are not per-sample work.
	otelIDs, spIDs := progIDs(p.pid()), progIDs(sp.pid())
	names := progNames(otelIDs, kindSample)
	if len(names) == 0 {
		return row, fmt.Errorf("no perf_event program among the %d eBPF programs of the OpenTelemetry profiler (pid %d)", len(otelIDs), p.pid())
	}
	req0 := o.sink.requests.Load()
	sp0, ot0 := readStats(spIDs, kindSample), readStats(otelIDs, kindSample)
	time.Sleep(sideWindow)
	row.spanprof = readStats(spIDs, kindSample).sub(sp0)
	row.otel = readStats(otelIDs, kindSample).sub(ot0)
	row.exports = o.sink.requests.Load() - req0
	if len(o.rows) == 0 {
		b.logf("OpenTelemetry profiler %s: sampling programs %s", o.version, strings.Join(names, ", "))
	}
	if row.spanprof.runs == 0 || row.otel.runs == 0 {
		return row, fmt.Errorf("no samples in the window (spanprof %d, OpenTelemetry profiler %d runs)\n%s",
			row.spanprof.runs, row.otel.runs, tail(p.out.String()))
	}
	return row, nil
}

// progNames lists the names of the programs of kind k, as the kernel
// keeps them (15 characters at most).
func progNames(ids map[ebpf.ProgramID]progKind, k progKind) []string {
	var names []string
	eachProg(ids, k, func(p *ebpf.Program) {
		if info, err := p.Info(); err == nil {
			names = append(names, info.Name)
		}
	})
	slices.Sort(names)
	return slices.Compact(names)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// oneLine makes s fit in a markdown table cell.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.ReplaceAll(s, "|", `\|`)
}

// otelMedians gives, per workload, the medians of spanprof's and the
// OpenTelemetry profiler's ns per sample and of the per-window ratio.
func (b *bench) otelMedians(workload string) (sp, ot, ratio float64, ok bool) {
	var s, t, r []float64
	for _, row := range b.otel.rows {
		if row.workload == workload {
			s, t, r = append(s, row.spanprof.nsPerRun()), append(t, row.otel.nsPerRun()), append(r, row.ratio())
		}
	}
	if len(r) == 0 {
		return 0, 0, 0, false
	}
	return median(s), median(t), median(r), true
}

// otelTable lists every window of spanprof beside the OpenTelemetry
// profiler.
func (b *bench) otelTable() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| workload | round | spanprof ns/sample | OpenTelemetry profiler ns/sample | ratio | samples (spanprof / OpenTelemetry) | OTLP exports received |\n|---|---|---|---|---|---|---|\n")
	for _, r := range b.otel.rows {
		fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.3f | %d / %d | %d |\n", r.workload, r.round,
			r.spanprof.nsPerRun(), r.otel.nsPerRun(), r.ratio(), r.spanprof.runs, r.otel.runs, r.exports)
	}
	return sb.String()
}

// otelSection is the report's section on the OpenTelemetry profiler
// windows, or "" when the per-sample phase did not run.
func (b *bench) otelSection() string {
	o := &b.otel
	if len(o.rows) == 0 && o.notMeasured == "" && o.failed == "" {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("## eBPF time per on-CPU sample, spanprof and the OpenTelemetry eBPF profiler side by side\n\n")
	if len(o.rows) > 0 {
		fmt.Fprintf(&sb, "After each window above, a second %v window on the same workload processes: the same spanprof kept attached, bpftrace detached, "+
			"and the OpenTelemetry eBPF profiler (%s; `ebpf-profiler -samples-per-second 999 -off-cpu-threshold 0 -v`, exporting to a do-nothing OTLP/gRPC sink in the benchmark process, "+
			"started through `spanbench %s`, under which raising RLIMIT_MEMLOCK is a no-op) attached; "+
			"the window starts once its log says it has added every workload process (read their mappings, loaded their unwind tables): before, its samples of them cost a few µs of start-up, not unwinding. "+
			"Its per-sample program is `native_tracer_entry` (perf_event); the unwinders it tail-calls count in its run time, its tracepoint programs are left out. "+
			"Exports: the profiler's OTLP requests the sink received in the window.\n\n%s\n",
			sideWindow, o.version, seccompRlimitFlag, b.otelTable())
	}
	if o.notMeasured != "" {
		fmt.Fprintf(&sb, "Not measured: %s\n\n", o.notMeasured)
	}
	if o.failed != "" {
		fmt.Fprintf(&sb, "Not measured after a failed window:\n\n```\n%s\n```\n\n", o.failed)
	}
	return sb.String()
}

// otelBars writes the bar lines of the OpenTelemetry profiler: one per
// workload measured, and once why it was not measured (or not beyond a
// failed window).
func (b *bench) otelBars(sb *strings.Builder, bar func(name string, v, limit float64, how string)) {
	const name, limit = "eBPF ns per on-CPU sample, spanprof / OpenTelemetry eBPF profiler side by side", 0.3
	for _, w := range sideWorkloads() {
		if sp, ot, r, ok := b.otelMedians(w.name); ok {
			bar(name+", "+w.name, r, limit, fmt.Sprintf("%.0f / %.0f ns, ratio %.3f", sp, ot, r))
		}
	}
	if why := b.otel.notMeasured + b.otel.failed; why != "" {
		fmt.Fprintf(sb, "| %s | not measured: %s | ≤ %g | not measured |\n", name, oneLine(why), limit)
	}
}
