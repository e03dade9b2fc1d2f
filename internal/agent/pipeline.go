package agent

import (
	"log/slog"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// Pipeline is the configuration of the pipeline cfg describes
// (pipeline.Open), logging to log. cfg is valid (Validate).
func (c Config) Pipeline(log *slog.Logger) (pipeline.Config, error) {
	sym, err := c.Symbolization.pipeline()
	if err != nil {
		return pipeline.Config{}, err
	}
	return c.pipeline(sym, log), nil
}

// pipeline is the pipeline's configuration with sym for symbolization.
func (c Config) pipeline(sym pipeline.Symbolization, log *slog.Logger) pipeline.Config {
	return pipeline.Config{
		Frequency: c.Frequency,
		PIDs:      c.Processes.PIDs,
		// Matched in user space, beside the PIDs.
		Executables:     c.Processes.Executables,
		OffCPU:          pipeline.OffCPUOptions{Enabled: c.OffCPU, Threshold: c.OffCPUThreshold},
		GoWaitFrequency: c.GoWaitFrequency,
		Symbolization:   sym,
		Budget: pipeline.Budget{CacheMiB: c.Symbolization.CacheMiB, DWARFSpillDir: c.Symbolization.DWARFCacheDir,
			RingMiB: c.Memory.RingMiB, GCPercent: c.Memory.GCPercent, LimitMiB: c.Memory.LimitMiB},
		Logger: log,
	}
}

// fieldNames are the configuration's names of the pipeline's options, in
// its errors.
var fieldNames = map[pipeline.Field]string{
	pipeline.FieldFrequency:       "frequency",
	pipeline.FieldGCPercent:       "memory gc_percent",
	pipeline.FieldCacheMiB:        "symbolization cache_mib",
	pipeline.FieldRingMiB:         "memory ring_mib",
	pipeline.FieldLimitMiB:        "memory limit_mib",
	pipeline.FieldGoWaitFrequency: "go_wait_frequency",
	pipeline.FieldOffCPUThreshold: "off-CPU threshold",
}

// debuginfodURLs are the configured servers, else DEBUGINFOD_URLS.
func (s Symbolization) debuginfodURLs() []string { return pipeline.DebuginfodURLs(s.DebuginfodURLs) }

// pipeline resolves the mode: with none configured, full when debuginfod
// servers are (here or in DEBUGINFOD_URLS), else local.
func (s Symbolization) pipeline() (pipeline.Symbolization, error) {
	urls := s.debuginfodURLs()
	mode, err := pipeline.ResolveMode(s.Mode, len(urls) > 0)
	if err != nil {
		return pipeline.Symbolization{}, err
	}
	return pipeline.Symbolization{Mode: mode, DebugDirs: s.DebugDirs, DebuginfodURLs: urls, NoJVMPerfmap: s.NoJVMPerfmap}, nil
}
