package agent

import (
	"log/slog"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// Pipeline is the configuration of the pipeline cfg describes
// (pipeline.Open), logging to log. cfg is valid (Validate).
func (c Config) Pipeline(log *slog.Logger) (pipeline.Config, error) {
	sym, err := c.Symbolization.pipeline()
	if err != nil {
		return pipeline.Config{}, err
	}
	return pipeline.Config{
		Frequency: c.Frequency,
		PIDs:      c.Processes.PIDs,
		// Executables are matched in user space (Agent.wanted).
		SelectInUserSpace: len(c.Processes.Executables) > 0,
		OffCPU:            sampler.OffCPUOptions{Enabled: c.OffCPU, Threshold: c.OffCPUThreshold},
		GoWaitFrequency:   c.GoWaitFrequency,
		Symbolization:     sym,
		Budget: pipeline.Budget{CacheMiB: c.Symbolization.CacheMiB, DWARFSpillDir: c.Symbolization.DWARFCacheDir,
			RingMiB: c.Memory.RingMiB, GCPercent: c.Memory.GCPercent, LimitMiB: c.Memory.LimitMiB},
		Logger: log,
	}, nil
}

// debuginfodURLs are the configured servers, else DEBUGINFOD_URLS.
func (s Symbolization) debuginfodURLs() []string {
	if len(s.DebuginfodURLs) > 0 {
		return s.DebuginfodURLs
	}
	return debuginfod.URLsFromEnv()
}

// pipeline resolves the mode: with none configured, full when debuginfod
// servers are (here or in DEBUGINFOD_URLS), else local.
func (s Symbolization) pipeline() (pipeline.Symbolization, error) {
	urls := s.debuginfodURLs()
	mode, err := symbolize.ResolveMode(s.Mode, len(urls) > 0)
	if err != nil {
		return pipeline.Symbolization{}, err
	}
	return pipeline.Symbolization{Mode: mode, DebugDirs: s.DebugDirs, DebuginfodURLs: urls, NoJVMPerfmap: s.NoJVMPerfmap}, nil
}
