package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spanprof/spanprof/internal/agent"
	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
)

// runAgent is `spanprof agent`: configuration errors and missing
// privileges end it with one line on stderr and exit code 1.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := agent.ParseArgs(args, os.LookupEnv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	applyMemory(cfg.Memory, os.LookupEnv, log)

	sampledPIDs := cfg.Processes.PIDs
	if len(cfg.Processes.Executables) > 0 {
		sampledPIDs = nil // executables are matched in user space
	}
	tracker := proc.NewTracker("/proc", log)
	defer tracker.Close()
	s, err := sampler.New(sampler.Options{
		Frequency: cfg.Frequency,
		PIDs:      sampledPIDs,
		OnExec:    tracker.Exec, // read short-lived processes at once
		OnExit:    tracker.ExitAt,
		OffCPU:    sampler.OffCPUOptions{Enabled: cfg.OffCPU, Threshold: cfg.OffCPUThreshold},
		RingBytes: cfg.Memory.RingMiB << 20,
		Logger:    log,
		// The collector sizes each process's window from its first
		// samples, copied with the widest.
		NewProcessWindow: newProcessWindow(),
	})
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	defer s.Close()

	watch := correlate.New(s, correlate.GoLabels(), log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := agent.Options{Logger: log, Registry: reg, Correlator: watch, Tracker: tracker}
	var gw *gowait.Sampler
	if cfg.OffCPU && cfg.GoWaitFrequency > 0 {
		// Goroutine waits park no thread: sample them from outside. The
		// agent's tracker forgets the processes that exited after every
		// report; a private one would keep every Go process ever sampled.
		gw = gowait.New(gowait.Options{Frequency: cfg.GoWaitFrequency, Logger: log, Tracker: tracker})
		opts.GoWait = gw
		agent.RegisterGoWaitStats(reg, gw.Stats)
	}
	a, err := agent.New(cfg, s, opts)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	if gw != nil {
		// One symbol cache for both: the Go binaries whose goroutines are
		// sampled are the ones the reports symbolize anyway, and the
		// agent's cache is bounded by symbolization.cache_mib and emptied
		// of idle binaries after every report.
		gw.SetSymbolizer(a.Symbolizer())
		for _, pid := range cfg.Processes.PIDs {
			_ = gw.Add(uint32(pid)) // not Go, or gone: nothing to sample
		}
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if len(cfg.Processes.PIDs) == 0 {
			go gw.Discover(gctx, 5*time.Second)
		}
		go gw.Run(gctx)
	}
	// Named targets are inspected before the first sample so that their
	// first samples already carry span ids.
	for _, pid := range cfg.Processes.PIDs {
		if err := watch.Scan(uint32(pid)); err != nil {
			log.Warn("inspect process for trace context", "pid", pid, "error", err)
		}
	}
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go watch.Run(stopWatch)
	if err := s.Start(); err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	go s.Run()
	// Everything that needs more than reading other processes and
	// attaching uprobes is done: keep only that.
	keep := runtimeCapabilities()
	if a.AttachesJVMs() {
		keep = append(keep, jvmAttachCapabilities...)
	}
	if kept, err := dropCapabilities(keep); err != nil {
		log.Warn("keeping start-up capabilities", "error", err)
	} else {
		log.Info("dropped capabilities not needed after start-up", "kept", fmt.Sprint(kept))
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	return 0
}

// applyMemory sets the garbage collector's target and the soft memory
// limit from the configuration, unless GOGC or GOMEMLIMIT set them.
func applyMemory(m agent.Memory, env agent.LookupEnv, log *slog.Logger) {
	if v, ok := env("GOGC"); ok {
		log.Debug("GOGC from the environment", "gogc", v)
	} else {
		debug.SetGCPercent(m.GCPercent)
	}
	if v, ok := env("GOMEMLIMIT"); ok {
		log.Debug("GOMEMLIMIT from the environment", "gomemlimit", v)
	} else if m.LimitMiB > 0 {
		debug.SetMemoryLimit(int64(m.LimitMiB) << 20)
	}
}
