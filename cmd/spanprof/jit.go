package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/jvm"
	"github.com/spanprof/spanprof/internal/perfmap"
)

// jvmRefreshEvery is how often record asks the JVMs it sampled for their
// perf maps, and the least time between two requests to one JVM from the
// samples' misses; each request costs the JVM a walk of its code cache
// (tens of ms) and spanprof an attach.
const jvmRefreshEvery = 5 * time.Second

// jitMaps is record's view of JIT perf maps: the cache that reads them,
// the processes sampled (watched so that their maps outlive them) and,
// unless --no-jvm-perfmap, the requester that has JVMs write theirs.
type jitMaps struct {
	cache *perfmap.Cache
	jvms  *jvm.PerfMapper // nil: JVMs are not asked
	log   *slog.Logger

	mu   sync.Mutex
	pids map[uint32]bool
	stop chan struct{}
}

func newJITMaps(askJVMs bool, log *slog.Logger) *jitMaps {
	j := &jitMaps{log: log, pids: map[uint32]bool{}}
	opts := perfmap.Options{}
	if askJVMs {
		// The cache reads each version a JVM writes before the next one
		// replaces it, and an address in no entry asks the JVM again.
		j.jvms = jvm.NewPerfMapper(jvm.PerfMapOptions{MinInterval: jvmRefreshEvery, Logger: log,
			Written: func(pid uint32) { j.cache.Load(pid) }})
		opts.Miss = j.jvms.Refresh
	}
	j.cache = perfmap.New(opts)
	return j
}

// seen notes a sampled process.
func (j *jitMaps) seen(pid uint32) {
	j.mu.Lock()
	known := j.pids[pid]
	j.pids[pid] = true
	j.mu.Unlock()
	if !known {
		j.cache.Watch(pid)
	}
}

func (j *jitMaps) sampled() []uint32 {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]uint32, 0, len(j.pids))
	for pid := range j.pids {
		out = append(out, pid)
	}
	return out
}

// start asks the sampled JVMs for their maps on a schedule, so that code
// freed before the end (and JVMs that exit) keeps its names.
func (j *jitMaps) start() (stop func()) {
	if j.jvms == nil {
		return func() {}
	}
	j.stop = make(chan struct{})
	go func() {
		tk := time.NewTicker(jvmRefreshEvery)
		defer tk.Stop()
		for {
			select {
			case <-j.stop:
				return
			case <-tk.C:
				j.jvms.RefreshAll(j.sampled())
			}
		}
	}()
	return func() { close(j.stop) }
}

// final asks every sampled JVM once more at the end, whatever the rate
// bound says: methods compiled since the last request are named.
func (j *jitMaps) final() {
	if j.jvms == nil {
		return
	}
	for _, pid := range j.sampled() {
		if j.jvms.IsJVM(pid) {
			j.jvms.RefreshNow(pid)
		}
	}
}

func (j *jitMaps) report(log *slog.Logger, stderr io.Writer) {
	st := j.cache.Stats()
	log.Debug("perf maps", "reads", st.Reads, "named", st.Hits, "bad_lines", st.BadLines,
		"truncated", st.Truncated, "kept_from_rewrites", st.Kept, "read_after_exit", st.Exited)
	if j.jvms == nil {
		return
	}
	js := j.jvms.Stats()
	if js.Attaches+js.Failures == 0 {
		return
	}
	fmt.Fprintf(stderr, "spanprof: asked JVMs for their perf maps (Compiler.perfmap) %d times, %d failed, %d more rate-limited; %.1f ms in all, %.1f ms the longest\n",
		js.Attaches+js.Failures, js.Failures, js.Skipped, ms(js.Time), ms(js.Max))
}

func ms(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
