// Package jit is what `record` and the agent share of JIT perf maps: the
// cache that reads /tmp/perf-PID.map files (internal/perfmap), the
// processes sampled (watched, so that their maps outlive them) and,
// unless turned off, the requester that has running JVMs write theirs
// (internal/jvm), on a schedule and when a sample lands in JIT code that
// no entry covers.
package jit

import (
	"log/slog"
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/jvm"
	"github.com/spanprof/spanprof/internal/perfmap"
)

// RefreshEvery is how often the sampled JVMs are asked for their perf
// maps, and the least time between two requests to one JVM from the
// schedule; each request costs the JVM a walk of its code cache (tens of
// ms) and spanprof an attach.
const RefreshEvery = 5 * time.Second

// Maps is the view of JIT perf maps of one recording or agent. Safe for
// concurrent use.
type Maps struct {
	Cache *perfmap.Cache
	JVMs  *jvm.PerfMapper // nil: JVMs are not asked
	log   *slog.Logger

	mu     sync.Mutex
	pids   map[uint32]bool
	exited map[uint32]time.Time // when Exited marked the pid
	// asked: JVMs asked since the last Round on a miss or by Final. A
	// miss asks a JVM at once whatever the schedule's bound, so that a
	// method compiled since the last request is named in the report that
	// meets it, but once per round: code no map will ever cover (freed
	// before any request) does not cost an attach per lookup.
	asked map[uint32]bool
	stop  chan struct{}
}

// New returns the maps, read through procRoot ("/proc" when empty);
// askJVMs turns on the JVM requests.
func New(procRoot string, askJVMs bool, log *slog.Logger) *Maps {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Maps{log: log, pids: map[uint32]bool{}, exited: map[uint32]time.Time{}, asked: map[uint32]bool{}}
	opts := perfmap.Options{ProcRoot: procRoot}
	if askJVMs {
		// The cache reads each version a JVM writes before the next one
		// replaces it, and an address in no entry asks the JVM again.
		// The pipeline tells of execs, forks (NewImage) and exits, so
		// the mapper need not read every sampled process's start time at
		// each refresh to notice a reused or gone pid.
		m.JVMs = jvm.NewPerfMapper(jvm.PerfMapOptions{MinInterval: RefreshEvery, Logger: log, Told: true,
			Written: func(pid uint32) { m.Cache.Load(pid) }})
		opts.Miss = m.miss
	}
	m.Cache = perfmap.New(opts)
	return m
}

func (m *Maps) miss(pid uint32) bool {
	m.mu.Lock()
	if m.asked[pid] {
		m.mu.Unlock()
		return false
	}
	m.asked[pid] = true
	m.mu.Unlock()
	return m.JVMs.RefreshNow(pid)
}

// Seen notes a sampled process.
func (m *Maps) Seen(pid uint32) {
	m.mu.Lock()
	known := m.pids[pid]
	m.pids[pid] = true
	m.mu.Unlock()
	if !known {
		m.Cache.Watch(pid)
	}
}

// Sampled returns the processes seen and not forgotten.
func (m *Maps) Sampled() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]uint32, 0, len(m.pids))
	for pid := range m.pids {
		out = append(out, pid)
	}
	return out
}

// Start asks the sampled JVMs for their maps every RefreshEvery until
// the returned function is called, so that code freed before the report
// (and JVMs that exit) keeps its names.
func (m *Maps) Start() (stop func()) {
	if m.JVMs == nil {
		return func() {}
	}
	m.stop = make(chan struct{})
	go func() {
		tk := time.NewTicker(RefreshEvery)
		defer tk.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tk.C:
				m.JVMs.RefreshAll(m.Sampled())
			}
		}
	}()
	return func() { close(m.stop) }
}

// Round starts a report: each JVM may again be asked once on a miss.
func (m *Maps) Round() {
	m.mu.Lock()
	clear(m.asked)
	m.mu.Unlock()
}

// Final asks every sampled JVM not yet asked in this round for its map,
// whatever the schedule's bound: at the end of a recording, methods
// compiled since the last request are named.
func (m *Maps) Final() {
	if m.JVMs == nil {
		return
	}
	for _, pid := range m.Sampled() {
		m.mu.Lock()
		done := m.asked[pid]
		m.asked[pid] = true
		m.mu.Unlock()
		if !done && m.JVMs.IsJVM(pid) {
			m.JVMs.RefreshNow(pid)
		}
	}
}

// NewImage notes that pid runs another image than before: it exec'd, or a
// new process took the pid. Whether it is a JVM is found out again at its
// next request: a shell that execs java is one from then on.
func (m *Maps) NewImage(pid uint32) {
	if m.JVMs != nil {
		m.JVMs.Forget(pid)
	}
}

// Exited notes that pid exited: its names keep answering until
// ForgetExited, called once its samples were symbolized.
func (m *Maps) Exited(pid uint32) {
	m.Cache.Exited(pid)
	if m.JVMs != nil {
		m.JVMs.Forget(pid) // nothing left to ask; its map stays read
	}
	m.mu.Lock()
	m.exited[pid] = time.Now()
	m.mu.Unlock()
}

// ForgetExited drops what is known of the processes marked by Exited
// before before.
func (m *Maps) ForgetExited(before time.Time) {
	m.Cache.ForgetExited(before)
	m.mu.Lock()
	gone := make([]uint32, 0, len(m.exited))
	for pid, at := range m.exited {
		if at.After(before) {
			continue
		}
		delete(m.pids, pid)
		delete(m.asked, pid)
		delete(m.exited, pid)
		gone = append(gone, pid)
	}
	m.mu.Unlock()
	if m.JVMs != nil {
		for _, pid := range gone {
			m.JVMs.Forget(pid)
		}
	}
}

// Stats are the counters of the JVM requests; zero when they are off.
func (m *Maps) Stats() jvm.PerfMapStats {
	if m.JVMs == nil {
		return jvm.PerfMapStats{}
	}
	return m.JVMs.Stats()
}
