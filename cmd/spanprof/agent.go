package main

import (
	"context"
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
	return exitCode("agent", agentMain(ctx, args, stdout, stderr), stderr)
}

func agentMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := agent.ParseArgs(args, os.LookupEnv, stdout)
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	pcfg, err := cfg.Pipeline(log)
	if err != nil {
		return err
	}
	pipeline.ApplyRuntime(pcfg.Budget, os.LookupEnv, log)
	p, err := pipeline.Open(pcfg)
	if err != nil {
		return err
	}
	defer p.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a, err := agent.New(cfg, p, agent.Options{Logger: log, Registry: reg})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
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
	return a.Run(ctx)
}
