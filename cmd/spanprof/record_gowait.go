package main

import (
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/profile"
)

// goWaitLost adds to prof.Lost the goroutines that the sampling of parked
// goroutines (with --off-cpu: their waits park goroutines, not threads,
// so sched_switch never sees them; internal/gowait, docs/go-offcpu.md)
// found waiting but could not sample. Its samples reached the collector
// with the kernel's (Pipeline.GoroutineWaits).
func goWaitLost(p *pipeline.Pipeline, prof *profile.Profile) {
	if p.GoWait == nil {
		return
	}
	st := p.GoWait.Stats()
	if prof.Lost == nil {
		prof.Lost = map[string]uint64{}
	}
	for k, v := range map[string]uint64{
		"go_wait_invalid":      st.DroppedInvalid,
		"go_wait_changed":      st.DroppedChanged,
		"go_wait_unreadable":   st.DroppedUnreadable,
		"go_wait_labels":       st.DroppedLabels,
		"go_wait_backlog":      st.DroppedBacklog,
		"go_wait_uncovered_ns": st.UncoveredNs,
	} {
		if v > 0 {
			prof.Lost[k] = v
		}
	}
}
