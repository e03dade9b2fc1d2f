package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/profile"
)

// goWaitRun samples the parked goroutines of Go targets during a
// recording with --off-cpu: their waits park goroutines, not threads, so
// sched_switch never sees them (internal/gowait, docs/go-offcpu.md).
type goWaitRun struct {
	s      *gowait.Sampler
	cancel context.CancelFunc
	done   chan struct{}
}

// startGoWait starts sampling the given pids, or every Go process when
// pids is empty; nil when freq is 0.
func startGoWait(freq int, pids []int, log *slog.Logger) *goWaitRun {
	if freq <= 0 {
		return nil
	}
	s := gowait.New(gowait.Options{Frequency: freq, Logger: log})
	for _, pid := range pids {
		if err := s.Add(uint32(pid)); err != nil {
			log.Debug("no goroutine sampling", "pid", pid, "error", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &goWaitRun{s: s, cancel: cancel, done: make(chan struct{})}
	if len(pids) == 0 {
		go s.Discover(ctx, 5*time.Second)
	}
	go func() { defer close(g.done); s.Run(ctx) }()
	return g
}

// merge stops sampling and adds the goroutine samples to prof, and the
// goroutines that were waiting but could not be sampled to prof.Lost.
func (g *goWaitRun) merge(prof *profile.Profile) {
	if g == nil {
		return
	}
	g.cancel()
	<-g.done
	g.s.Merge(prof)
	st := g.s.Stats()
	if prof.Lost == nil {
		prof.Lost = map[string]uint64{}
	}
	for k, v := range map[string]uint64{
		"go_wait_invalid":      st.DroppedInvalid,
		"go_wait_changed":      st.DroppedChanged,
		"go_wait_unreadable":   st.DroppedUnreadable,
		"go_wait_labels":       st.DroppedLabels,
		"go_wait_uncovered_ns": st.UncoveredNs,
	} {
		if v > 0 {
			prof.Lost[k] = v
		}
	}
}
