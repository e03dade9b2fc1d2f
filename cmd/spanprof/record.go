package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spanprof/spanprof/internal/cli"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/export"
	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// pidList is a repeatable --pid flag.
type pidList []int

func (p *pidList) String() string { return fmt.Sprint([]int(*p)) }

func (p *pidList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return fmt.Errorf("not a process id: %q", part)
		}
		*p = append(*p, n)
	}
	return nil
}

type recordFlags struct {
	pids      pidList
	all       bool
	duration  time.Duration
	frequency int
	offCPU    bool
	// offCPUThreshold tunes off-CPU sampling (sampler.OffCPUOptions).
	offCPUThreshold time.Duration
	output          string
	// format is --format, or the one output's name selects.
	format string
	// command is `record -- CMD ARGS…`: started, recorded to its exit.
	command     []string
	durationSet bool
	// goWaitFrequency samples parked goroutines with --off-cpu (gowait).
	goWaitFrequency int
	verbose         bool
	// Symbolization (docs/symbolization.md).
	symbolize      symbolize.Mode
	debugDirs      stringList
	debuginfodWait time.Duration
	// noJVMPerfmap: do not attach to JVMs for their perf maps (internal/jit).
	noJVMPerfmap bool
	// The memory budget (pipeline.Budget), as the agent's configuration
	// has it.
	cacheMiB      int
	dwarfCacheDir string
	ringMiB       int
}

// recordCacheMiB bounds the symbol cache of a recording: above the
// agent's 32 MiB, since a recording symbolizes all its binaries at once
// at the end, with no report in between to release idle ones.
const recordCacheMiB = 64

// recordRingMiB is the ring of a recording: twice the agent's, since
// recordings often run at high frequencies for a short time.
const recordRingMiB = 8

// pipeline is the configuration of the recording's pipeline.
func (f *recordFlags) pipeline(log *slog.Logger) pipeline.Config {
	return pipeline.Config{
		Frequency: f.frequency, PIDs: f.pids, Logger: log,
		OffCPU:          sampler.OffCPUOptions{Enabled: f.offCPU, Threshold: f.offCPUThreshold},
		GoWaitFrequency: f.goWaitFrequency,
		Symbolization: pipeline.Symbolization{Mode: f.symbolize, DebugDirs: f.debugDirs,
			DebuginfodURLs: debuginfod.URLsFromEnv(), NoJVMPerfmap: f.noJVMPerfmap},
		Budget: pipeline.Budget{CacheMiB: f.cacheMiB, DWARFSpillDir: f.dwarfCacheDir, RingMiB: f.ringMiB,
			GCPercent: pipeline.DefaultGCPercent},
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*l = append(*l, s)
	return nil
}

func parseRecordFlags(args []string, stdout, stderr io.Writer) (*recordFlags, error) {
	f := &recordFlags{}
	var err error
	fs := flag.NewFlagSet("spanprof record", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&f.pids, "pid", "profile this process (repeatable; default: all processes)")
	fs.BoolVar(&f.all, "all", false, "profile every process (the default without --pid)")
	cli.DurationVar(fs, &f.duration, "duration", 10*time.Second, "how long to record")
	fs.IntVar(&f.frequency, "frequency", 99, "on-CPU samples per second per CPU")
	fs.BoolVar(&f.offCPU, "off-cpu", false, "also record off-CPU time (sched_switch)")
	cli.DurationVar(fs, &f.offCPUThreshold, "off-cpu-threshold", sampler.DefaultOffCPUThreshold,
		"off-CPU sampling: threads switching out less often than this are recorded exactly, others in proportion, with unbiased weights; 1ns records every wait")
	fs.IntVar(&f.goWaitFrequency, "go-wait-frequency", gowait.DefaultFrequency,
		"with --off-cpu: samples per second of the parked goroutines of Go processes (0: off)")
	fs.StringVar(&f.output, "output", "", "write to FILE, - for stdout; format by suffix: .otlp.json .otlp.pb .pb.gz .folded .html (default: summary on stdout)")
	fs.StringVar(&f.format, "format", "", "output format, whatever the file name: "+strings.Join(export.Formats(), ", ")+" (needed for --output -)")
	fs.BoolVar(&f.verbose, "v", false, "verbose logs on stderr")
	mode := fs.String("symbolize", "", "none: addresses and build IDs for a backend to symbolize; local: binaries and debug directories, offline; full: also debuginfod (DEBUGINFOD_URLS) (default full when DEBUGINFOD_URLS is set, else local)")
	fs.Var(&f.debugDirs, "debug-dir", "directory of separate debug files (.build-id/xx/rest.debug, debuglink targets); repeatable, /usr/lib/debug is always searched")
	fs.BoolVar(&f.noJVMPerfmap, "no-jvm-perfmap", false, "do not ask running JVMs (HotSpot attach, Compiler.perfmap) to write /tmp/perf-PID.map; Java frames then stay addresses unless the JVM writes the map itself")
	fs.IntVar(&f.cacheMiB, "symbol-cache-mib", recordCacheMiB, "bound, in MiB, of the parsed binaries kept for symbolization (symbol tables, Go pclntabs, DWARF unit tables); the least recently used go first")
	fs.StringVar(&f.dwarfCacheDir, "dwarf-cache-dir", pipeline.DefaultDWARFSpillDir(), "keep compressed DWARF of debug files decompressed in `DIR` (up to 256 MiB), read back instead of inflated again; empty keeps none")
	fs.IntVar(&f.ringMiB, "ring-mib", recordRingMiB, "size in MiB of the ring buffer the kernel writes samples into: a power of two from 2 to 1024 (losses when it is full are counted)")
	cli.DurationVar(fs, &f.debuginfodWait, "debuginfod-wait", 5*time.Second, "when debuginfod is used, how long to wait at the end for debug files being fetched")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: spanprof record [--pid N]... [--duration 10s] [--frequency 99] [--off-cpu] [--output FILE|-] [--format F] [-- CMD ARGS...]\n\n"+
			"With a command, spanprof starts it and records it until it exits (or --duration, if given, ends first).\n\n")
		fs.PrintDefaults()
	}
	if err = cli.Parse(fs, args, stdout); err != nil {
		return nil, err
	}
	if f.symbolize, err = symbolize.ResolveMode(*mode, len(debuginfod.URLsFromEnv()) > 0); err != nil {
		return nil, fmt.Errorf("--symbolize: %w", err)
	}
	if f.debuginfodWait < 0 {
		return nil, fmt.Errorf("--debuginfod-wait must not be negative, got %v", f.debuginfodWait)
	}
	f.command = fs.Args()
	fs.Visit(func(fl *flag.Flag) { f.durationSet = f.durationSet || fl.Name == "duration" })
	if len(f.command) > 0 && (f.all || len(f.pids) > 0) {
		return nil, errors.New("a command to run excludes --pid and --all: spanprof records the command it starts")
	}
	if f.all && len(f.pids) > 0 {
		return nil, errors.New("--all and --pid exclude each other")
	}
	if f.frequency < 1 || f.frequency > 100000 {
		return nil, fmt.Errorf("--frequency %d out of range 1..100000", f.frequency)
	}
	if f.goWaitFrequency < 0 || f.goWaitFrequency > 1000 {
		return nil, fmt.Errorf("--go-wait-frequency %d out of range 0..1000", f.goWaitFrequency)
	}
	if f.cacheMiB < 1 {
		return nil, fmt.Errorf("--symbol-cache-mib %d: want at least 1", f.cacheMiB)
	}
	if r := f.ringMiB; r < 2 || r&(r-1) != 0 || r > 1024 {
		return nil, fmt.Errorf("--ring-mib %d: want a power of two from 2 to 1024", r)
	}
	if f.duration <= 0 {
		return nil, fmt.Errorf("--duration must be positive, got %v", f.duration)
	}
	if f.offCPUThreshold <= 0 || f.offCPUThreshold > sampler.MaxOffCPUThreshold {
		return nil, fmt.Errorf("--off-cpu-threshold %v out of range 1ns..%v", f.offCPUThreshold, sampler.MaxOffCPUThreshold)
	}
	if f.format != "" && f.output == "" {
		return nil, errors.New("--format needs --output FILE (or - for stdout)")
	}
	if f.output != "" {
		// Found now, not after the whole recording.
		if err := export.CheckDestination(f.output); err != nil {
			return nil, err
		}
		if f.format, err = export.ResolveFormat(f.output, f.format); err != nil {
			return nil, err
		}
	}
	if f.pids, err = resolveTargets("/proc", f.pids, stderr); err != nil {
		return nil, err
	}
	return f, nil
}

func runRecord(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseRecordFlags(args, stdout, stderr)
	if err == nil {
		err = record(ctx, f, stdout, stderr)
	}
	return exitCode("record", err, stderr)
}

func record(ctx context.Context, f *recordFlags, stdout, stderr io.Writer) error {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var cmd *gated
	if len(f.command) > 0 {
		// Held before its exec until the programs are attached, so the
		// recording sees it from its first instruction.
		out := stdout
		if f.output == "-" {
			out = stderr // stdout carries the profile
		}
		var err error
		if cmd, err = startGated(f.command, os.Stdin, out, stderr); err != nil {
			return err
		}
		defer cmd.Kill()
		f.pids = []int{cmd.Pid()}
	}
	pcfg := f.pipeline(log)
	pipeline.ApplyRuntime(pcfg.Budget, os.LookupEnv, log)
	p, err := pipeline.Open(pcfg)
	if err != nil {
		return err
	}
	defer p.Close()
	sym := &symbolization{Symbols: p.Symbols, wait: f.debuginfodWait}
	if sym.Mode == symbolize.ModeFull && sym.Debuginfod == nil {
		fmt.Fprintln(stderr, "spanprof: --symbolize=full without DEBUGINFOD_URLS: using local debug files only")
	}
	c, tracker := p.Collector, p.Tracker
	stopJIT := sym.JIT.Start()
	defer stopJIT()
	if err := p.Start(ctx); err != nil {
		return err
	}
	dropRecordCapabilities(f.output != "", sym.JIT.JVMs != nil, log)

	target := "all processes"
	if len(f.pids) > 0 {
		target = fmt.Sprintf("pid %v", []int(f.pids))
	}
	var cmdDone <-chan struct{}
	if cmd != nil {
		target = fmt.Sprintf("%s (pid %d)", strings.Join(f.command, " "), cmd.Pid())
		cmdDone = cmd.done
	}
	what := fmt.Sprintf("%d Hz", f.frequency)
	if f.offCPU {
		what += fmt.Sprintf(" and off-CPU (threshold %v)", f.offCPUThreshold)
	}
	var timeout <-chan time.Time
	if cmd == nil || f.durationSet {
		timer := time.NewTimer(f.duration)
		defer timer.Stop()
		timeout = timer.C
		fmt.Fprintf(stderr, "spanprof: recording %s at %s for %v (Ctrl-C stops early)\n", target, what, f.duration)
	} else {
		fmt.Fprintf(stderr, "spanprof: recording %s at %s until it exits (Ctrl-C stops early)\n", target, what)
	}
	cpuBefore := cpuTimes(f.pids)
	if cmd != nil {
		u := cpuBefore[cmd.Pid()]
		u.name = filepath.Base(f.command[0]) // still the gate until it runs
		cpuBefore[cmd.Pid()] = u
		cmd.Run()
	}
	start := time.Now()
	prog := &progress{w: stderr, on: isTerminal(stderr), start: start}
	if timeout != nil {
		prog.total = f.duration
	}
	nrec := 0

	alive := time.NewTicker(250 * time.Millisecond)
	defer alive.Stop()
	events, goWaits := p.Source.Events(), p.GoroutineWaits()
loop:
	for {
		select {
		case e, ok := <-events:
			if !ok {
				break loop // the reader ended; what it read is kept
			}
			p.Handle(e)
			if e.Sample != nil {
				nrec++
			}
		case b := <-goWaits:
			p.HandleBatch(b, nil)
			nrec += len(b)
		case <-timeout:
			break loop
		case <-cmdDone:
			prog.clear()
			fmt.Fprintf(stderr, "spanprof: %s\n", cmd.Exited())
			break loop
		case <-ctx.Done():
			prog.clear()
			fmt.Fprintln(stderr, "spanprof: interrupted, writing what was recorded")
			break loop
		case <-alive.C:
			if cmd == nil && len(f.pids) > 0 && !anyAlive(f.pids) {
				prog.clear()
				fmt.Fprintln(stderr, "spanprof: every target process exited")
				break loop
			}
			prog.show(nrec)
		}
	}
	prog.clear()
	end := time.Now()
	cpuAfter := cpuTimes(f.pids)
	if cmd != nil {
		select {
		case <-cmd.done:
		default:
			fmt.Fprintf(stderr, "spanprof: recording ended before %s (pid %d): stopping it\n", f.command[0], cmd.Pid())
			cmd.Kill()
		}
	}
	// Take everything the kernel wrote before the programs were detached,
	// and the goroutine-wait sampler's last ticks.
	if !p.Drain(10*time.Second, nil) {
		log.Warn("ring buffer not drained after 10s; writing what was read")
	}
	counters, err := p.Source.Counters()
	if err != nil {
		log.Warn("read counters", "error", err)
	}
	sym.prepare(ctx, c, stderr)
	sym.JIT.Final()
	prof := c.Build(end)
	reportJIT(sym.JIT, log, stderr)
	sym.report(log)
	prof.Lost = lostCounts(counters)
	goWaitLost(p, prof)
	sym.reportUnnamed(stderr, profile.CountUnnamed(prof), len(debuginfod.URLsFromEnv()) > 0)
	if n := totalLost(prof.Lost); n > 0 {
		fmt.Fprintf(stderr, "spanprof: %d samples lost: %v\n", n, prof.Lost)
	}
	if n := tracker.Synthesized(); n > 0 {
		fmt.Fprintf(stderr, "spanprof: %d processes were gone before /proc could be read; their executable and loader were placed from the exec\n", n)
	}
	if n := tracker.Forked(); n > 0 {
		fmt.Fprintf(stderr, "spanprof: %d pids were taken by a fork after their process exited; samples after the fork were symbolized against the new process\n", n)
	}
	reportExitMaps(stderr, tracker.ExitStats(), counters)
	if w, ok := p.Correlator.(interface{ Stats() correlate.Stats }); ok {
		reportTraceContext(stderr, w.Stats())
	}
	st := c.Stats()
	if n := st.CtxAttrsUnnamed + st.CtxAttrsMalformed + st.CtxAttrsCut; n > 0 {
		fmt.Fprintf(stderr, "spanprof: thread-context attributes left out: %d unnamed by the process context's key map, %d samples with malformed attributes, %d samples past the bound on distinct attribute sets (their trace ids are kept)\n",
			st.CtxAttrsUnnamed, st.CtxAttrsMalformed, st.CtxAttrsCut)
	}
	if st.ImagesMissing > 0 {
		fmt.Fprintf(stderr, "spanprof: %d %s no process image to be symbolized against; their user frames stay addresses\n", st.ImagesMissing, plural(int(st.ImagesMissing), "stack had", "stacks had"))
	}
	if st.StacksCut > 0 {
		fmt.Fprintf(stderr, "spanprof: %d %s cut short: the frame-pointer chain went through code built without frame pointers (spanprof check names such binaries)\n", st.StacksCut, plural(int(st.StacksCut), "user stack was", "user stacks were"))
	}
	if st.UnwindCFIFrames > 0 || st.UnwindWindowCut > 0 || st.UnwindNoInfo > 0 || st.UnwindBadRule > 0 || st.UnwindBelowWindow > 0 || st.UnwindLinkFrames > 0 || st.UnwindBadLink > 0 {
		fmt.Fprintf(stderr, "spanprof: %d user frames of %d samples found by their unwind rules in code without frame pointers, %d in JIT code by its instructions or frame links; stacks cut: %d by the stack window (%d windows sized, %d widened), %d deeper than the window at frameless code, %d at code without unwind information, %d at rules not evaluated, %d at JIT frame links that failed their checks\n",
			st.UnwindCFIFrames, st.Samples, st.UnwindLinkFrames, st.UnwindWindowCut, st.WindowsSized, st.WindowsWidened, st.UnwindBelowWindow, st.UnwindNoInfo, st.UnwindBadRule, st.UnwindBadLink)
	}
	if st.PreExec > 0 {
		fmt.Fprintf(stderr, "spanprof: %d %s taken while a process was starting a new program (exec); %d were named after the program it ran before\n",
			st.PreExec, plural(int(st.PreExec), "sample was", "samples were"), st.PreExecAttributed)
	}
	if len(prof.Samples) == 0 {
		if cmd != nil && cmd.cmd.ProcessState != nil && !cpuAfter[cmd.Pid()].ok {
			// Exited and reaped: its own rusage tells its CPU time.
			ps := cmd.cmd.ProcessState
			cpuAfter[cmd.Pid()] = cpuUse{cpu: cpuBefore[cmd.Pid()].cpu + ps.UserTime() + ps.SystemTime(), ok: true}
		}
		return nothingRecorded(f.pids, cpuBefore, cpuAfter, end.Sub(start), f.offCPU, totalLost(prof.Lost))
	}
	switch f.output {
	case "":
		return export.WriteSummary(stdout, prof, 15)
	case "-":
		if err := export.Write(stdout, f.format, prof); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
	default:
		if err := export.WriteOutput(f.output, f.format, prof); err != nil {
			return err
		}
	}
	n := len(prof.Samples)
	fmt.Fprintf(stderr, "spanprof: wrote %d %s to %s\n", n, plural(n, "sample", "samples"), outputName(f.output))
	return nil
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			return true
		}
	}
	return false
}

// reportExitMaps says what the mappings captured at exits added, and what
// they could not (docs/reliability.md, process churn).
func reportExitMaps(w io.Writer, st proc.ExitStats, counters map[string]uint64) {
	if st.Processes > 0 {
		fmt.Fprintf(w, "spanprof: %d exited processes got %d mappings (libraries, vDSO) from their exit\n", st.Processes, st.Mappings)
	}
	missed, dropped, untracked := counters["exit_maps_missed"], counters["exit_vmas_dropped"], counters["exit_maps_untracked"]
	if st.NoFile > 0 || missed+dropped+untracked > 0 {
		fmt.Fprintf(w, "spanprof: mappings of exited processes left out: %d exits not captured, %d mappings not in a capture, %d processes not tracked, %d files not found by their inode\n",
			missed, dropped, untracked, st.NoFile)
	}
}

// lostCounts keeps the counters that are losses, for the profile.
func lostCounts(c map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range c {
		if strings.HasPrefix(k, "lost_") && v > 0 {
			out[strings.TrimPrefix(k, "lost_")] = v
		}
	}
	return out
}

func totalLost(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func outputName(path string) string {
	if path == "-" {
		return "stdout"
	}
	return path
}

// reportTraceContext tells what the trace-context watcher found after
// the processes' start: libraries loaded late, process contexts
// republished, and what it could not read. Silent when none of it
// happened.
func reportTraceContext(w io.Writer, s correlate.Stats) {
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
