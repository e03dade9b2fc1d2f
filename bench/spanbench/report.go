package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// med is the median of f over the rows of profiler name.
func (b *bench) med(name string, f func(slowRow) float64) float64 {
	var xs []float64
	for _, r := range b.slow {
		if r.prof == name {
			xs = append(xs, f(r))
		}
	}
	return median(xs)
}

func costMed(rows []costRow, label string, f func(costRow) float64) float64 {
	var xs []float64
	for _, r := range rows {
		if r.label == label {
			xs = append(xs, f(r))
		}
	}
	return median(xs)
}

func labels(rows []costRow) []string {
	var ls []string
	for _, r := range rows {
		if !slices.Contains(ls, r.label) {
			ls = append(ls, r.label)
		}
	}
	return ls
}

func machine() string {
	var sb strings.Builder
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&sb, "- CPUs: %d (%s)\n", runtime.NumCPU(), model)
	fmt.Fprintf(&sb, "- kernel: %s\n", strings.TrimSpace(string(kernel)))
	fmt.Fprintf(&sb, "- load average at the end: %s\n", strings.TrimSpace(string(load)))
	fmt.Fprintf(&sb, "- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	return sb.String()
}

func pct(x float64) string { return fmt.Sprintf("%+.1f %%", 100*x) }

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// slowdownTable is the workload table: medians, slowdown vs baseline, eBPF
// time per run, and spanprof's own CPU and memory.
func (b *bench) slowdownTable() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| profiler | chain elapsed (ms) | chain slowdown, paired: median (min … max) | pingpong ns/round | pingpong slowdown, paired | eBPF ns/sample | eBPF ns/switch | profiler CPU in window (ms) | CPU total (ms) | samples | CPU µs/sample | VmHWM (MiB) |\n")
	fmt.Fprintf(&sb, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range profilers("", b.reference) {
		name := p.name
		chain := b.med(name, func(r slowRow) float64 { return r.chainNs })
		ping := b.med(name, func(r slowRow) float64 { return r.pingNs })
		ns := b.med(name, func(r slowRow) float64 { return r.sample.nsPerRun() })
		sw := b.med(name, func(r slowRow) float64 { return r.switches.nsPerRun() })
		cw := b.med(name, func(r slowRow) float64 { return ms(r.cpuWindow) })
		ct := b.med(name, func(r slowRow) float64 { return ms(r.cpuTotal) })
		hwm := b.med(name, func(r slowRow) float64 { return float64(r.hwmKiB) / 1024 })
		samples := b.med(name, func(r slowRow) float64 { return float64(r.samples) })
		per := b.med(name, func(r slowRow) float64 {
			if r.samples == 0 {
				return 0
			}
			return float64(r.cpuTotal.Microseconds()) / float64(r.samples)
		})
		chainSlow, pingSlow := "–", "–"
		if name != "baseline" {
			chainSlow = spreadOf(values(b.pairedSlowdowns(name, func(r slowRow) float64 { return r.chainNs }))).pct()
			pingSlow = spreadOf(values(b.pairedSlowdowns(name, func(r slowRow) float64 { return r.pingNs }))).pct()
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			chain/1e6, chainSlow, ping, pingSlow,
			num(ns, "%.0f"), num(sw, "%.0f"), num(cw, "%.0f"), num(ct, "%.0f"), num(samples, "%.0f"), num(per, "%.1f"), num(hwm, "%.1f"))
	}
	return sb.String()
}

func num(x float64, f string) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf(f, x)
}

// ratios are the quality bars of SPEC.md, each as a ratio against its
// peer in the same run.
func (b *bench) ratios() string {
	var sb strings.Builder
	bar := func(name string, v, limit float64, how string) {
		verdict := "met"
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			verdict = "no data" // a figure was missing: 0/0 compared as met
		case v > limit:
			verdict = "NOT met"
		}
		fmt.Fprintf(&sb, "| %s | %s | ≤ %g | %s |\n", name, how, limit, verdict)
	}
	fmt.Fprintf(&sb, "| bar | measured (medians) | limit | verdict |\n|---|---|---|---|\n")
	for _, w := range sideWorkloads() {
		if sp, bt, r, ok := b.perSampleMedians(w.name); ok {
			bar("eBPF ns per on-CPU sample, spanprof / bpftrace side by side, "+w.name, r, 0.5,
				fmt.Sprintf("%.0f / %.0f ns, ratio %.2f", sp, bt, r))
		}
	}
	b.otelBars(&sb, bar)
	if len(b.slow) > 0 {
		chain := func(r slowRow) float64 { return r.chainNs }
		slowBar := func(name, label string) {
			ratio, _, text := b.slowdownRatio(name, "perf record -g", chain)
			// A ratio means something only when the peer's own slowdown
			// was measured: slower than the baseline in every round.
			if peer := values(b.pairedSlowdowns("perf record -g", chain)); len(peer) == 0 || slices.Min(peer) <= 0 {
				fmt.Fprintf(&sb, "| %s | %s | ≤ 0.5 | not resolved: perf record -g was not slower than the baseline in every round (noise: %s) |\n",
					label, text, b.noise(chain))
				return
			}
			bar(label, ratio, 0.5, text)
		}
		slowBar("spanprof", "workload slowdown at 999 Hz, spanprof / perf record -g (chain, paired by round: median (min … max))")
		// Context for the bar: the slowdown of the timer alone, and each
		// sampler's share above it.
		floor := spreadOf(values(b.pairedSlowdowns("timer floor", chain)))
		above := func(name string) float64 { return spreadOf(values(b.pairedSlowdowns(name, chain))).med - floor.med }
		if floor.med != 0 {
			fmt.Fprintf(&sb, "| context: slowdown of the 999 Hz CPU-clock events alone (an eBPF program that does nothing) | %s; above it: perf record -g %+.1f %%, spanprof %+.1f %%, bpftrace %+.1f %% | – | – |\n",
				floor.pct(), 100*above("perf record -g"), 100*above("spanprof"), 100*above("bpftrace"))
		}
		if b.reference != "" {
			slowBar("spanprof (reference build)", "same, the reference build (-reference)")
		}
		ns := func(n string) float64 { return b.med(n, func(r slowRow) float64 { return r.sample.nsPerRun() }) }
		bar("eBPF ns per on-CPU sample, spanprof / bpftrace (separate runs of the slowdown phase)", ns("spanprof")/ns("bpftrace"), 0.5,
			fmt.Sprintf("%.0f / %.0f ns = %.2f", ns("spanprof"), ns("bpftrace"), ns("spanprof")/ns("bpftrace")))
		sw := func(n string) float64 { return b.med(n, func(r slowRow) float64 { return r.switches.nsPerRun() }) }
		bar("eBPF ns per switch, spanprof --off-cpu / offcputime (each alone, pingpong)", sw("spanprof --off-cpu")/sw("offcputime"), 0.1,
			fmt.Sprintf("%.0f / %.0f ns = %.3f", sw("spanprof --off-cpu"), sw("offcputime"), sw("spanprof --off-cpu")/sw("offcputime")))
	}
	if len(b.offcpu) > 0 {
		var sp, oc, rs []float64
		for _, r := range b.offcpu {
			if r.offcputime > 0 {
				sp, oc, rs = append(sp, r.spanprof), append(oc, r.offcputime), append(rs, r.spanprof/r.offcputime)
			}
		}
		bar("eBPF ns per switch, spanprof / offcputime (bench/offcpu.sh, side by side)", median(rs), 0.1,
			fmt.Sprintf("%.0f / %.0f ns = %.3f", median(sp), median(oc), median(rs)))
	}
	for _, l := range labels(b.agents) {
		var rs []costRow
		for _, r := range b.agents {
			if r.label == l && !r.noBar {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		name := strings.TrimPrefix(l, "agent, ")
		mib := spreadOf(mapRows(rs, func(r costRow) float64 { return float64(r.hwmKiB) / 1024 }))
		cpu := spreadOf(mapRows(rs, func(r costRow) float64 { return 100 * float64(r.cpuWindow) / float64(r.window) }))
		rounds := ""
		if len(rs) > 1 {
			rounds = fmt.Sprintf(", %d rounds: median (min … max)", len(rs))
		}
		if rs[0].procs == 200 {
			bar("agent RSS (VmHWM), "+name, mib.med/60, 1, fmt.Sprintf("%s MiB of 60 MiB%s", mib.fmt("%.1f"), rounds))
		}
		// The distinct executables' window holds their first scan; the
		// other runs are the steady state the CPU bar is about.
		if rs[0].procs != 200 || rs[0].warmup > 0 {
			bar(fmt.Sprintf("agent CPU at 99 Hz over %.0f s, %s", rs[0].window.Seconds(), name), cpu.med, 1,
				fmt.Sprintf("%s %% of a core%s", cpu.fmt("%.2f"), rounds))
		}
	}
	if t := b.churnTable(); t != "" {
		fmt.Fprintf(&sb, "\nAgent CPU per exec under churn (no bar: context; SPEC asks ≤ 120 µs):\n\n%s", t)
	}
	for _, sk := range b.skipped {
		fmt.Fprintf(&sb, "\nSkipped: %s\n", sk)
	}
	return sb.String()
}

func costTable(rows []costRow) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| run | processes | threads | samples/s | eBPF ns/sample | CPU in window (%% of a core) | CPU total (ms) | CPU µs/sample (total) | VmHWM (MiB) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range labels(rows) {
		m := func(f func(costRow) float64) float64 { return costMed(rows, l, f) }
		var procs, threads int
		for _, r := range rows {
			if r.label == l {
				procs, threads = r.procs, r.threads
			}
		}
		fmt.Fprintf(&sb, "| %s | %d | %d | %.0f | %s | %.2f | %.0f | %s | %.1f |\n", l, procs, threads,
			m(func(r costRow) float64 { return float64(r.samples) / r.window.Seconds() }),
			num(m(func(r costRow) float64 { return r.sample.nsPerRun() }), "%.0f"),
			m(func(r costRow) float64 { return 100 * float64(r.cpuWindow) / float64(r.window) }),
			m(func(r costRow) float64 { return ms(r.cpuTotal) }),
			num(m(func(r costRow) float64 {
				if r.samples == 0 {
					return 0
				}
				return float64(r.cpuTotal.Microseconds()) / float64(r.samples)
			}), "%.1f"),
			m(func(r costRow) float64 { return float64(r.hwmKiB) / 1024 }))
	}
	return sb.String()
}

func (b *bench) summary() string {
	var sb strings.Builder
	sb.WriteString("\nQuality bars (SPEC.md), medians of interleaved rounds:\n\n")
	sb.WriteString(b.ratios())
	if len(b.slow) > 0 {
		fmt.Fprintf(&sb, "\nWorkloads (%d rounds, medians; slowdowns paired by round):\n\n%s", b.slowRounds, b.slowdownTable())
		fmt.Fprintf(&sb, "\nChain slowdown by round:\n\n%s\nNoise: %s.\n", b.perRoundTable(), b.noise(func(r slowRow) float64 { return r.chainNs }))
	}
	return sb.String()
}

func (b *bench) report() string {
	var sb strings.Builder
	sb.WriteString("# spanprof benchmark results\n\nProduced by `make bench` (`go run ./bench/spanbench " + strings.Join(os.Args[1:], " ") + "`).\n\n")
	sb.WriteString("## Machine\n\n" + machine() + "- other engineers' builds and tests share the machine: timings are noisy; every comparison is interleaved and reported as the median of its rounds\n\n")
	if len(b.errs) > 0 {
		sb.WriteString("## Failed phases\n\n```\n" + strings.Join(b.errs, "\n") + "\n```\n\n")
	}
	sb.WriteString("## Quality bars\n\n" + b.ratios() + "\n")
	if len(b.side) > 0 {
		fmt.Fprintf(&sb, "## eBPF time per on-CPU sample, side by side\n\n%d × each workload at once; `spanprof record --all --frequency 999` and bpftrace `profile:hz:999 { @[kstack, ustack] = count(); }` attached together; "+
			"run time and count of each one's perf_event programs (`kernel.bpf_stats_enabled`) over the same %v window; %d rounds.\n\n%s\n",
			b.instances, sideWindow, b.rounds, b.perSampleTable())
	}
	sb.WriteString(b.otelSection())
	if len(b.slow) > 0 {
		fmt.Fprintf(&sb, "## Workloads under each profiler\n\n%d × chain-clang fixed mode (%d calls) at once, then pingpong for %d s; "+
			"%d rounds, profiler order rotated per round; medians. A slowdown is taken per round against that round's baseline run, then given as the median over rounds with its range (min … max). eBPF times from `kernel.bpf_stats_enabled` over the chain phase (per sample) "+
			"and the pingpong phase (per switch), for the programs the profiler's own process holds. Profiler CPU: utime+stime while the workloads ran, "+
			"and in total (spanprof record symbolizes and writes at exit). Samples: what spanprof wrote.\n\n%s\n",
			b.instances, b.calls, b.pingSecs, b.slowRounds, b.slowdownTable())
		fmt.Fprintf(&sb, "Chain slowdown by round (against the same round's baseline):\n\n%s\nNoise: %s.\n\n", b.perRoundTable(), b.noise(func(r slowRow) float64 { return r.chainNs }))
	}
	if len(b.offcpu) > 0 {
		sb.WriteString("## bench/offcpu.sh (spanprof and offcputime on the same switches)\n\n")
		for i, r := range b.offcpu {
			fmt.Fprintf(&sb, "Round %d:\n\n```\n%s```\n\n", i+1, r.out)
		}
	}
	if len(b.freq) > 0 {
		fmt.Fprintf(&sb, "## Cost growth: frequency\n\n`spanprof record --pid` of 2 chain-clang processes busy 80 %% of the time, %d s window, %d rounds, medians.\n\n%s\n",
			b.scaleSecs, b.rounds, costTable(b.freq))
	}
	if len(b.procs) > 0 {
		fmt.Fprintf(&sb, "## Cost growth: processes\n\n`spanprof record --frequency 99 --pid` of N testdata/bench/fanout processes (distinct executables, each its own build ID) × 10 threads, each thread spinning 100 µs every 500 ms; %d s window, %d rounds, medians.\n\n%s\n",
			b.scaleSecs, b.rounds, costTable(b.procs))
	}
	if len(b.agents) > 0 {
		fmt.Fprintf(&sb, "## Agent\n\n`spanprof agent --frequency 99 --report-interval 10s` exporting to a do-nothing OTLP/gRPC sink in the benchmark process; "+
			"200 processes for %d s, busy processes for %d s. CPU in window is utime+stime over the window; samples are the agent's samples_collected.\n\n%s\n",
			b.agentScaleSecs, b.agentSecs, costTable(b.agents))
		if b.churnSamples > 0 {
			fmt.Fprintf(&sb, "Churn: `testdata/reliability/build/churn` starting %d children a second (each spinning 300 µs), the agent with `--all`: "+
				"%d of %d (%.1f %%) of the children's exported samples have every frame named (their processes are mostly gone before the report).\n\n",
				churnRate, b.churnNamed, b.churnSamples, 100*float64(b.churnNamed)/float64(b.churnSamples))
		}
		for _, r := range b.agents {
			if r.profileOut != "" {
				fmt.Fprintf(&sb, "### perf profile of the agent: %s\n\n`perf record -F 4999 -g -p AGENT` over the window.\n\n```\n%s```\n\n", r.label, r.profileOut)
			}
		}
	}
	if len(b.bigNode) > 0 {
		fmt.Fprintf(&sb, "## Agent on a big node\n\n`spanprof agent --frequency 99 --report-interval 10s` from its start, for %d s, on a node running a %s "+
			"(generated, out/bench/biggo) plus clickhouse-server under queries and headless Chromium when installed. Named: the big program's exported samples with every frame named.\n\n"+
			"| build | VmHWM MiB | CPU %% of a core, %d s | worst 10 s %% | per 10 s window %% | named |\n|---|---|---|---|---|---|\n%s\n\n",
			bigNodeSecs, "Go program of over 100 MB unstripped", bigNodeSecs, strings.Join(b.bigNode, "\n"))
	}
	if b.micro != "" {
		sb.WriteString("## Go micro-benchmarks\n\n`go test -run '^$' -bench . -benchmem -count 1` of the hot paths.\n\n```\n" + b.micro + "```\n")
	}
	return sb.String()
}

// mapRows is f of every row.
func mapRows(rs []costRow, f func(costRow) float64) []float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return xs
}

// churnTable is the agent's CPU per exec under churn, per build: CPU in
// the window over the execs the workload started in it.
func (b *bench) churnTable() string {
	var sb strings.Builder
	for _, l := range labels(b.agents) {
		var rs []costRow
		for _, r := range b.agents {
			if r.label == l && r.execRate > 0 {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		if sb.Len() == 0 {
			sb.WriteString("| run | rounds | CPU, % of a core: median (min … max) | CPU per churn exec, µs | new processes on the machine, per s | CPU per new process on the machine, µs |\n|---|---|---|---|---|---|\n")
		}
		cpu := spreadOf(mapRows(rs, func(r costRow) float64 { return 100 * float64(r.cpuWindow) / float64(r.window) }))
		per := spreadOf(mapRows(rs, func(r costRow) float64 {
			return float64(r.cpuWindow.Microseconds()) / (float64(r.execRate) * r.window.Seconds())
		}))
		forks := spreadOf(mapRows(rs, func(r costRow) float64 { return float64(r.forks) / r.window.Seconds() }))
		perFork := spreadOf(mapRows(rs, func(r costRow) float64 {
			if r.forks == 0 {
				return 0
			}
			return float64(r.cpuWindow.Microseconds()) / float64(r.forks)
		}))
		fmt.Fprintf(&sb, "| %s | %d | %s | %s | %s | %s |\n", strings.TrimPrefix(l, "agent, "), len(rs), cpu.fmt("%.1f"),
			per.fmt("%.0f"), forks.fmt("%.0f"), perFork.fmt("%.0f"))
	}
	return sb.String()
}
