package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spanprof/spanprof/internal/agent"
	"github.com/spanprof/spanprof/internal/pipeline"
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
	pcfg, err := cfg.Pipeline(log)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	pipeline.ApplyRuntime(pcfg.Budget, os.LookupEnv, log)
	p, err := pipeline.Open(pcfg)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	defer p.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a, err := agent.New(cfg, p, agent.Options{Logger: log, Registry: reg})
	if err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
	if err := p.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "spanprof agent: %v\n", err)
		return 1
	}
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
