// Command spanbench runs spanprof side by side with perf, bpftrace and
// libbpf-tools offcputime on the same workloads, in interleaved rounds,
// and writes the medians and ratios to out/bench/results.md. `make bench`
// runs it as root; see BENCHMARKS.md for what each figure means.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

type bench struct {
	// bigNode are the rows of the agent's big-node case.
	bigNode                              []string
	root                                 string
	spanprof, chain, pingpong, fanout    string
	reference                            string
	tmp                                  string
	rounds, instances, calls, pingSecs   int
	slowRounds                           int
	scaleSecs, agentScaleSecs, agentSecs int
	phases                               map[string]bool
	agentCases                           map[string]bool
	log                                  *os.File

	// otelBin is the OpenTelemetry eBPF profiler binary; "" when not measured.
	otelBin string

	slow   []slowRow
	side   []sideRow
	otel   otelPeer
	freq   []costRow
	procs  []costRow
	agents []costRow
	// churnNamed: of the churn children's samples the agent exported, how
	// many, and how many with every frame named.
	churnSamples, churnNamed int64
	offcpu                   []offcpuRun
	micro                    string
	errs                     []string
	skipped                  []string // cases not run, with the reason
	started                  time.Time
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == seccompRlimitFlag {
		err := seccompRlimitExec(os.Args[2:])
		fmt.Fprintf(os.Stderr, "spanbench %s: %v\n", seccompRlimitFlag, err)
		os.Exit(126)
	}
	b := &bench{log: os.Stderr, started: time.Now()}
	var out, phases, cases string
	flag.StringVar(&b.spanprof, "spanprof", "bin/spanprof", "spanprof binary")
	flag.IntVar(&b.rounds, "rounds", 3, "interleaved rounds of every comparison")
	flag.IntVar(&b.instances, "instances", 2, "chain-clang instances at once (one per CPU)")
	flag.StringVar(&b.otelBin, "otel-profiler", otelDefault, "OpenTelemetry eBPF profiler binary measured side by side in the per-sample phase (make bench-deps builds it); empty: not measured")
	flag.StringVar(&b.reference, "reference", "", "another spanprof binary measured in the same slowdown rounds (before/after)")
	flag.IntVar(&b.slowRounds, "slowdown-rounds", 5, "interleaved rounds of the slowdown phase")
	// About 5.5 s per instance on a quiet machine: long enough that a 1 %
	// slowdown (55 ms) stands above the start-up jitter of a run.
	flag.IntVar(&b.calls, "calls", 200000, "chain-clang fixed-mode calls per instance")
	flag.IntVar(&b.pingSecs, "pingpong-seconds", 3, "pingpong run per measurement")
	flag.IntVar(&b.scaleSecs, "scale-seconds", 10, "window of each cost-growth point")
	flag.IntVar(&b.agentScaleSecs, "agent-scale-seconds", 30, "agent window with 200 processes")
	flag.IntVar(&b.agentSecs, "agent-seconds", 60, "agent CPU window at 99 Hz")
	flag.StringVar(&phases, "phases", "micro,persample,slowdown,offcpu,growth,agent", "phases to run")
	flag.StringVar(&cases, "agent-cases", strings.Join(agentCases, ","), "runs of the agent phase")
	flag.StringVar(&out, "out", "out/bench/results.md", "results file")
	flag.Parse()
	b.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		b.phases[strings.TrimSpace(p)] = true
	}
	b.agentCases = map[string]bool{}
	for _, c := range strings.Split(cases, ",") {
		if c = strings.TrimSpace(c); !slices.Contains(agentCases, c) {
			fmt.Fprintf(os.Stderr, "spanbench: unknown agent case %q (want some of %s)\n", c, strings.Join(agentCases, ","))
			os.Exit(2)
		}
		b.agentCases[c] = true
	}
	if err := b.run(out); err != nil {
		fmt.Fprintf(os.Stderr, "spanbench: %v\n", err)
		os.Exit(1)
	}
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%5.0fs] %s\n", time.Since(b.started).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) run(out string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (loads eBPF programs, sets kernel.bpf_stats_enabled)")
	}
	var err error
	if b.root, err = os.Getwd(); err != nil {
		return err
	}
	for _, tool := range []string{"perf", "bpftrace", offcputimePath} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: make bench-deps installs the peers", tool)
		}
	}
	for _, dir := range []string{"testdata/fixtures", "testdata/offcpu", "testdata/bench", "testdata/reliability"} {
		if o, err := exec.Command("make", "-s", "-C", dir).CombinedOutput(); err != nil {
			return fmt.Errorf("make -C %s: %v\n%s", dir, err, o)
		}
	}
	b.spanprof, _ = filepath.Abs(b.spanprof)
	if b.reference != "" {
		b.reference, _ = filepath.Abs(b.reference)
	}
	if b.otelBin != "" {
		b.otelBin, _ = filepath.Abs(b.otelBin)
	}
	b.chain = filepath.Join(b.root, "testdata/fixtures/build/chain-clang")
	b.pingpong = filepath.Join(b.root, "testdata/offcpu/build/pingpong")
	b.fanout = filepath.Join(b.root, "testdata/bench/build/fanout")
	if b.tmp, err = os.MkdirTemp("", "spanbench"); err != nil {
		return err
	}
	defer os.RemoveAll(b.tmp)
	restore, err := enableBPFStats()
	if err != nil {
		return err
	}
	defer restore()

	if b.phases["micro"] {
		b.runMicro()
	}
	// A failed phase is reported and the others still run: on a shared
	// machine one flaky measurement should not void the rest.
	if b.phases["persample"] {
		b.phaseErr("persample", b.runPerSample())
	}
	if b.phases["slowdown"] {
		b.phaseErr("slowdown", b.runSlowdown())
	}
	if b.phases["offcpu"] {
		b.runOffCPU()
	}
	if b.phases["growth"] {
		b.phaseErr("growth", b.runGrowth())
	}
	if b.phases["agent"] {
		b.phaseErr("agent", b.runAgent())
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	md := b.report()
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(b.summary())
	fmt.Printf("\nfull results: %s (%.0f s)\n", out, time.Since(b.started).Seconds())
	if len(b.errs) > 0 {
		return fmt.Errorf("%d phases failed:\n%s", len(b.errs), strings.Join(b.errs, "\n"))
	}
	return nil
}

func (b *bench) phaseErr(phase string, err error) {
	if err != nil {
		b.logf("%s failed: %v", phase, err)
		b.errs = append(b.errs, fmt.Sprintf("%s: %v", phase, err))
	}
}

// runMicro runs the Go micro-benchmarks of the hot paths once.
func (b *bench) runMicro() {
	b.logf("micro-benchmarks")
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1",
		"./internal/sampler", "./internal/symbolize", "./internal/unwind", "./internal/profile",
		"./internal/export/otlp", "./bench/micro")
	o, err := cmd.CombinedOutput()
	b.micro = string(o)
	if err != nil {
		b.micro += fmt.Sprintf("\n(go test failed: %v)\n", err)
	}
}

// runSlowdown runs every profiler once per round, in an order rotated by
// round so no profiler always follows the same one.
func (b *bench) runSlowdown() error {
	profs := profilers(b.spanprof, b.reference)
	for r := range b.slowRounds {
		for i := range profs {
			k := (i + r) % len(profs)
			b.logf("slowdown round %d/%d: %s", r+1, b.slowRounds, profs[k].name)
			row, err := b.measureSlowdown(profs[k], r, i)
			if err != nil {
				return fmt.Errorf("%s: %w", profs[k].name, err)
			}
			b.slow = append(b.slow, row)
		}
	}
	return nil
}

// runGrowth measures spanprof record as frequency and process count grow.
func (b *bench) runGrowth() error {
	for r := range b.rounds {
		for _, f := range []int{99, 999, 9999} {
			b.logf("growth round %d/%d: %d Hz, 2 busy processes", r+1, b.rounds, f)
			ps, pids, err := b.startBusy(2, b.scaleSecs+30)
			if err != nil {
				return err
			}
			row := costRow{round: r, label: fmt.Sprintf("%d Hz", f), freq: f, procs: 2, threads: 2}
			args := append([]string{"record", "--frequency", fmt.Sprint(f), "--duration", "1h",
				"--output", filepath.Join(b.tmp, "growth.pb.gz")}, pidArgs(pids)...)
			row, err = b.measureSpanprof(row, args, "spanprof: recording", b.scaleSecs, 0)
			for _, p := range ps {
				p.kill()
			}
			if err != nil {
				return err
			}
			b.freq = append(b.freq, row)
		}
		for _, n := range []int{1, 10, 50, 200} {
			b.logf("growth round %d/%d: %d processes x 10 threads, 99 Hz", r+1, b.rounds, n)
			fan, pids, err := b.startFanout(n, 10, b.scaleSecs+60)
			if err != nil {
				return err
			}
			row := costRow{round: r, label: fmt.Sprintf("%d processes", n), freq: 99, procs: n, threads: 10 * n}
			args := append([]string{"record", "--frequency", "99", "--duration", "1h",
				"--output", filepath.Join(b.tmp, "growth.pb.gz")}, pidArgs(pids)...)
			row, err = b.measureSpanprof(row, args, "spanprof: recording", b.scaleSecs, 0)
			fan.kill()
			if err != nil {
				return err
			}
			b.procs = append(b.procs, row)
		}
	}
	return nil
}
