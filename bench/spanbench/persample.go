package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// sideRow is one window of spanprof and bpftrace sampling the same
// workload at the same time: eBPF time per sample of each.
type sideRow struct {
	workload      string
	round         int
	spanprof, bpf progStat
	// ref is the -reference build's, attached in the same window; zero
	// without one.
	ref progStat
}

func (r sideRow) ratio() float64 {
	if r.bpf.nsPerRun() == 0 {
		return 0
	}
	return r.spanprof.nsPerRun() / r.bpf.nsPerRun()
}

// sideWorkload is a CPU-bound frame-pointer workload of the per-sample
// phase, two instances at once (one per CPU).
type sideWorkload struct {
	name string
	args func(b *bench) []string
}

func sideWorkloads() []sideWorkload {
	return []sideWorkload{
		{"chain-clang, 9 frames", func(b *bench) []string {
			return []string{b.chain, "100000000", os.DevNull, "fixed"}
		}},
		{"deep, 49 frames", func(b *bench) []string {
			return []string{filepath.Join(b.root, "testdata/bench/build/deep"), "40", "100000000"}
		}},
		// A node that starts short processes all the time (a build's
		// compilers, health checks, cron): each instance a loop of
		// chain-clang runs of a few milliseconds, every one a new
		// process (fork and exec) of the same executable.
		{shortLived, func(b *bench) []string {
			return []string{"/bin/sh", "-c", "while :; do " + b.chain + " 300 /dev/null fixed; done"}
		}},
	}
}

// shortLived is the workload of short processes.
const shortLived = "short-lived chain-clang, 9 frames"

// sideWindow is the measured window; both profilers are attached for all
// of it, so machine noise hits both alike.
const sideWindow = 4 * time.Second

// runPerSample measures eBPF time per on-CPU sample of spanprof against
// bpftrace's generic stack sampler with both attached at once to the same
// workload, over the same window. Measured apart, the two runs see
// different machine load; side by side, only the programs differ. Then
// the same against the OpenTelemetry eBPF profiler (otelprof.go).
func (b *bench) runPerSample() error {
	defer b.otelPrepare()()
	if b.otel.notMeasured != "" {
		b.logf("per-sample: OpenTelemetry eBPF profiler not measured: %s", b.otel.notMeasured)
	}
	for round := 1; round <= b.rounds; round++ {
		for _, w := range sideWorkloads() {
			row, err := b.sideBySide(w, round)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			b.logf("per-sample %s round %d: spanprof %.0f ns, bpftrace %.0f ns, ratio %.2f, reference %.0f ns",
				w.name, round, row.spanprof.nsPerRun(), row.bpf.nsPerRun(), row.ratio(), row.ref.nsPerRun())
			b.side = append(b.side, row)
			if n := len(b.otel.rows); n > 0 && b.otel.rows[n-1].workload == w.name && b.otel.rows[n-1].round == round {
				o := b.otel.rows[n-1]
				b.logf("per-sample %s round %d: spanprof %.0f ns, OpenTelemetry profiler %.0f ns, ratio %.3f, %d exports",
					w.name, round, o.spanprof.nsPerRun(), o.otel.nsPerRun(), o.ratio(), o.exports)
			}
		}
	}
	return nil
}

func (b *bench) sideBySide(w sideWorkload, round int) (sideRow, error) {
	row := sideRow{workload: w.name, round: round}
	var work []*proc
	defer func() {
		for _, p := range work {
			p.kill()
		}
	}()
	for range b.instances {
		a := w.args(b)
		p, err := start(a[0], a[1:]...)
		if err != nil {
			return row, err
		}
		work = append(work, p)
	}
	// The same configurations as the slowdown phase.
	byName := map[string]profiler{}
	for _, p := range profilers(b.spanprof, b.reference) {
		byName[p.name] = p
	}
	spProf, btProf := byName["spanprof"], byName["bpftrace"]
	sp, err := launch(spProf, b.tmp)
	if err != nil {
		return row, err
	}
	defer sp.stop(spProf.stop, 60*time.Second)
	bt, err := launch(btProf, b.tmp)
	if err != nil {
		return row, err
	}
	btStopped := false
	stopBT := func() {
		if !btStopped {
			btStopped = true
			bt.stop(btProf.stop, 10*time.Second)
		}
	}
	defer stopBT()
	var refIDs map[ebpf.ProgramID]progKind
	if refProf, ok := byName["spanprof (reference build)"]; ok {
		ref, err := launch(refProf, b.tmp)
		if err != nil {
			return row, err
		}
		defer ref.stop(refProf.stop, 60*time.Second)
		refIDs = progIDs(ref.pid())
	}
	spIDs, btIDs := progIDs(sp.pid()), progIDs(bt.pid())
	sp0, bt0, ref0 := readStats(spIDs, kindSample), readStats(btIDs, kindSample), readStats(refIDs, kindSample)
	time.Sleep(sideWindow)
	row.spanprof = readStats(spIDs, kindSample).sub(sp0)
	row.bpf = readStats(btIDs, kindSample).sub(bt0)
	row.ref = readStats(refIDs, kindSample).sub(ref0)
	if row.spanprof.runs == 0 || row.bpf.runs == 0 {
		return row, fmt.Errorf("no samples in the window (spanprof %d, bpftrace %d runs)", row.spanprof.runs, row.bpf.runs)
	}
	// A second window of the same length: the same spanprof beside the
	// OpenTelemetry eBPF profiler, bpftrace detached. A failure ends the
	// peer's windows (each try may wait a minute) but not the phase.
	if b.otel.measuring() {
		stopBT()
		o, err := b.otelWindow(w, round, sp, work)
		if err != nil {
			b.otel.failed = fmt.Sprintf("%s, round %d: %v", w.name, round, err)
			b.logf("per-sample: OpenTelemetry eBPF profiler failed: %v", err)
		} else {
			b.otel.rows = append(b.otel.rows, o)
		}
	}
	return row, nil
}

// perSampleTable lists every window, then medians per workload.
func (b *bench) perSampleTable() string {
	var sb strings.Builder
	if b.reference == "" {
		fmt.Fprintf(&sb, "| workload | round | spanprof ns/sample | bpftrace ns/sample | ratio | samples (spanprof / bpftrace) |\n|---|---|---|---|---|---|\n")
		for _, r := range b.side {
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.2f | %d / %d |\n", r.workload, r.round,
				r.spanprof.nsPerRun(), r.bpf.nsPerRun(), r.ratio(), r.spanprof.runs, r.bpf.runs)
		}
		return sb.String()
	}
	fmt.Fprintf(&sb, "| workload | round | spanprof ns/sample | reference ns/sample | bpftrace ns/sample | ratio | reference's ratio | samples (spanprof / reference / bpftrace) |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range b.side {
		refRatio := 0.0
		if r.bpf.nsPerRun() > 0 {
			refRatio = r.ref.nsPerRun() / r.bpf.nsPerRun()
		}
		fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %d / %d / %d |\n", r.workload, r.round,
			r.spanprof.nsPerRun(), r.ref.nsPerRun(), r.bpf.nsPerRun(), r.ratio(), refRatio, r.spanprof.runs, r.ref.runs, r.bpf.runs)
	}
	return sb.String()
}

// perSampleMedians gives, per workload, the medians of spanprof's and
// bpftrace's ns per sample and of the per-window ratio.
func (b *bench) perSampleMedians(workload string) (sp, bt, ratio float64, ok bool) {
	var s, t, r []float64
	for _, row := range b.side {
		if row.workload == workload {
			s, t, r = append(s, row.spanprof.nsPerRun()), append(t, row.bpf.nsPerRun()), append(r, row.ratio())
		}
	}
	if len(r) == 0 {
		return 0, 0, 0, false
	}
	return median(s), median(t), median(r), true
}
