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
	"github.com/spanprof/spanprof/internal/export"
	"github.com/spanprof/spanprof/internal/pipeline"
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
	// offCPUThreshold tunes off-CPU sampling (pipeline.OffCPUOptions).
	offCPUThreshold time.Duration
	output          string
	// format is --format, or the one output's name selects.
	format string
	// command is `record -- CMD ARGS…`: started, recorded to its exit.
	command     []string
	durationSet bool
	// goWaitFrequency samples parked goroutines with --off-cpu
	// (internal/gowait).
	goWaitFrequency int
	verbose         bool
	// Symbolization (docs/symbolization.md).
	symbolize      pipeline.Mode
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
		OffCPU:          pipeline.OffCPUOptions{Enabled: f.offCPU, Threshold: f.offCPUThreshold},
		GoWaitFrequency: f.goWaitFrequency,
		Symbolization: pipeline.Symbolization{Mode: f.symbolize, DebugDirs: f.debugDirs,
			DebuginfodURLs: pipeline.DebuginfodURLs(nil), NoJVMPerfmap: f.noJVMPerfmap},
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
	cli.DurationVar(fs, &f.offCPUThreshold, "off-cpu-threshold", pipeline.DefaultOffCPUThreshold,
		"off-CPU sampling: threads switching out less often than this are recorded exactly, others in proportion, with unbiased weights; 1ns records every wait")
	fs.IntVar(&f.goWaitFrequency, "go-wait-frequency", pipeline.DefaultGoWaitFrequency,
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
	if f.symbolize, err = pipeline.ResolveMode(*mode, len(pipeline.DebuginfodURLs(nil)) > 0); err != nil {
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
	if f.duration <= 0 {
		return nil, fmt.Errorf("--duration must be positive, got %v", f.duration)
	}
	// The ranges of what the kernel, the symbolizer and the runtime take,
	// as the agent's configuration is checked.
	pcfg := f.pipeline(nil)
	if err := pcfg.Validate(); err != nil {
		return nil, pipeline.Rename(err, recordFlagNames)
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

// recordFlagNames are the flags of the pipeline's options, in its errors.
var recordFlagNames = map[pipeline.Field]string{
	pipeline.FieldFrequency:       "--frequency",
	pipeline.FieldGoWaitFrequency: "--go-wait-frequency",
	pipeline.FieldCacheMiB:        "--symbol-cache-mib",
	pipeline.FieldRingMiB:         "--ring-mib",
	pipeline.FieldOffCPUThreshold: "--off-cpu-threshold",
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
	sym := p.Symbolization()
	if sym.Mode == pipeline.ModeFull && !p.Fetches() {
		fmt.Fprintln(stderr, "spanprof: --symbolize=full without DEBUGINFOD_URLS: using local debug files only")
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	dropRecordCapabilities(f.output != "", p.AttachesJVMs(), log)

	target := "all processes"
	if len(f.pids) > 0 {
		target = fmt.Sprintf("pid %v", []int(f.pids))
	}
	if cmd != nil {
		target = fmt.Sprintf("%s (pid %d)", strings.Join(f.command, " "), cmd.Pid())
	}
	what := fmt.Sprintf("%d Hz", f.frequency)
	if f.offCPU {
		what += fmt.Sprintf(" and off-CPU (threshold %v)", f.offCPUThreshold)
	}
	// The recording ends at its duration, at its command's exit, or when
	// interrupted (ctx): each is a cause of runCtx's end.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	timed := cmd == nil || f.durationSet
	if timed {
		t := time.AfterFunc(f.duration, func() { stop(errDurationReached) })
		defer t.Stop()
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
		go func() {
			select {
			case <-cmd.done:
				stop(errCommandExited)
			case <-runCtx.Done():
			}
		}()
	}
	start := time.Now()
	prog := &progress{w: stderr, on: isTerminal(stderr), start: start}
	if timed {
		prog.total = f.duration
	}

	var end time.Time
	var cpuAfter map[int]cpuUse
	err = p.Run(runCtx, pipeline.Hooks{
		// What was read is kept when the reader ends.
		EndWithSource: true,
		Every:         250 * time.Millisecond,
		Tick: func() bool {
			if cmd == nil && len(f.pids) > 0 && !anyAlive(f.pids) {
				prog.clear()
				fmt.Fprintln(stderr, "spanprof: every target process exited")
				return false
			}
			prog.show(int(p.Handled()))
			return true
		},
		Stopping: func() {
			prog.clear()
			switch cause := context.Cause(runCtx); {
			case ctx.Err() != nil:
				fmt.Fprintln(stderr, "spanprof: interrupted, writing what was recorded")
			case errors.Is(cause, errCommandExited):
				fmt.Fprintf(stderr, "spanprof: %s\n", cmd.Exited())
			}
			end = time.Now()
			cpuAfter = cpuTimes(f.pids)
			if cmd != nil {
				select {
				case <-cmd.done:
				default:
					fmt.Fprintf(stderr, "spanprof: recording ended before %s (pid %d): stopping it\n", f.command[0], cmd.Pid())
					cmd.Kill()
				}
			}
		},
	})
	// Run took everything the kernel wrote before the programs were
	// detached, and the goroutine-wait sampler's last ticks.
	if errors.Is(err, pipeline.ErrNotDrained) {
		log.Warn("ring buffer not drained after 10s; writing what was read")
	}
	if left := p.WaitDebugFiles(ctx, f.debuginfodWait, func(n int) {
		fmt.Fprintf(stderr, "spanprof: waiting for %d debug file(s) from debuginfod\n", n)
	}); left > 0 {
		fmt.Fprintf(stderr, "spanprof: %d debug file(s) still being fetched after %v; their frames stay module+offset\n", left, f.debuginfodWait)
	}
	prof := p.Build(end)
	st := p.Stats()
	if st.CountersErr != nil {
		log.Warn("read counters", "error", st.CountersErr)
	}
	reportJIT(st, log, stderr)
	reportSymbolization(sym, st, log)
	u := prof.CountUnnamed()
	reportUnnamed(stderr, sym, p.Fetches(), unnamedFrames{samples: u.Samples, binaries: len(u.Objects), names: u.String(),
		functions: u.Functions, addresses: u.Addresses}, len(pipeline.DebuginfodURLs(nil)) > 0)
	lost := totalLost(prof.Lost)
	if lost > 0 {
		fmt.Fprintf(stderr, "spanprof: %d samples lost: %v\n", lost, prof.Lost)
	}
	reportStats(stderr, st)
	if len(prof.Samples) == 0 {
		if cmd != nil && cmd.cmd.ProcessState != nil && !cpuAfter[cmd.Pid()].ok {
			// Exited and reaped: its own rusage tells its CPU time.
			ps := cmd.cmd.ProcessState
			cpuAfter[cmd.Pid()] = cpuUse{cpu: cpuBefore[cmd.Pid()].cpu + ps.UserTime() + ps.SystemTime(), ok: true}
		}
		return nothingRecorded(f.pids, cpuBefore, cpuAfter, end.Sub(start), f.offCPU, lost)
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
