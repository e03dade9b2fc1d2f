package jvm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// PerfMapOptions configure a PerfMapper.
type PerfMapOptions struct {
	ProcRoot string // default /proc
	// MinInterval is the least time between two requests to one JVM,
	// whatever asks (schedule or unnamed samples). Default 10s.
	MinInterval time.Duration
	// Timeout bounds one attach and command. Default 5s.
	Timeout time.Duration
	// Written is called after a JVM wrote its map, so the reader takes
	// this version of the file before the next one replaces it.
	Written func(pid uint32)
	// Told: the caller tells of every exec, exit and new process among
	// the pids it refreshes (Forget), as an ordered event stream does. The
	// mapper then keeps what it learnt of a pid until told, instead of
	// reading the process's start time at every request to notice a reused
	// or gone pid.
	Told   bool
	Logger *slog.Logger
}

// PerfMapStats counts the requests made.
type PerfMapStats struct {
	Attaches uint64        // Compiler.perfmap commands that succeeded
	Failures uint64        // attaches or commands that failed
	Skipped  uint64        // requests refused by MinInterval
	Exited   uint64        // requests that found the JVM gone: not failures
	Time     time.Duration // spent in attaches and commands, all told
	Max      time.Duration // the longest one
}

// PerfMapper asks JVMs to write /tmp/perf-PID.map (the diagnostic
// command Compiler.perfmap, JDK 17 and later) at most once per
// MinInterval each. HotSpot writes the map only when asked or, with
// -XX:+DumpPerfMapAtExit, at exit; the file lists every code blob of the
// code cache at that moment: compiled methods (with their tier), the
// interpreter, adapters and stubs. Safe for concurrent use.
type PerfMapper struct {
	opts PerfMapOptions
	log  *slog.Logger

	mu   sync.Mutex
	jvms map[uint32]*jvmState

	attaches, failures, skipped, exited atomic.Uint64
	spent, longest                      atomic.Int64
}

type jvmState struct {
	start   string // /proc/PID/stat start time: tells pid reuse apart
	isJVM   bool
	last    time.Time
	busy    bool
	refused bool // the JVM cannot be attached (ErrNoAttach): stop asking
}

// NewPerfMapper returns a PerfMapper.
func NewPerfMapper(opts PerfMapOptions) *PerfMapper {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PerfMapper{opts: opts, log: log, jvms: map[uint32]*jvmState{}}
}

// Stats returns the counts so far.
func (m *PerfMapper) Stats() PerfMapStats {
	return PerfMapStats{Attaches: m.attaches.Load(), Failures: m.failures.Load(), Skipped: m.skipped.Load(), Exited: m.exited.Load(),
		Time: time.Duration(m.spent.Load()), Max: time.Duration(m.longest.Load())}
}

// IsJVM reports whether pid maps libjvm.so; the answer is kept until
// the pid is reused, or until Forget with Told.
func (m *PerfMapper) IsJVM(pid uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state(pid).isJVM
}

func (m *PerfMapper) state(pid uint32) *jvmState {
	s := m.jvms[pid]
	if m.opts.Told {
		if s == nil {
			s = &jvmState{isJVM: m.mapsLibjvm(pid)}
			m.jvms[pid] = s
		}
		return s
	}
	start := m.startTime(pid)
	if s == nil || s.start != start {
		s = &jvmState{start: start, isJVM: start != "" && m.mapsLibjvm(pid)}
		m.jvms[pid] = s
	}
	return s
}

// Refresh asks JVM pid to write its perf map unless it was asked less
// than MinInterval ago, and reports whether a new map was written. It
// returns at once for a process that is no JVM.
func (m *PerfMapper) Refresh(pid uint32) bool { return m.refresh(pid, false) }

// RefreshNow asks JVM pid for its map whatever MinInterval says: once at
// the end of a recording, so that methods compiled since the last request
// are named.
func (m *PerfMapper) RefreshNow(pid uint32) bool { return m.refresh(pid, true) }

func (m *PerfMapper) refresh(pid uint32, force bool) bool {
	m.mu.Lock()
	s := m.state(pid)
	if !s.isJVM || s.refused {
		m.mu.Unlock()
		return false
	}
	if s.busy || !force && time.Since(s.last) < m.opts.MinInterval {
		m.mu.Unlock()
		m.skipped.Add(1)
		return false
	}
	s.busy, s.last = true, time.Now()
	m.mu.Unlock()

	t0 := time.Now()
	err := m.perfmap(int(pid))
	d := time.Since(t0)
	m.spent.Add(int64(d))
	for {
		old := m.longest.Load()
		if int64(d) <= old || m.longest.CompareAndSwap(old, int64(d)) {
			break
		}
	}
	m.mu.Lock()
	s.busy = false
	if err != nil && isNoAttach(err) {
		s.refused = true
	}
	m.mu.Unlock()
	if err != nil && m.gone(pid) {
		// It exited before the request (its exit not yet told): nothing
		// failed, and there is nothing left to ask.
		m.exited.Add(1)
		m.log.Debug("ask jvm for its perf map: it exited", "pid", pid, "error", err)
		m.Forget(pid)
		return false
	}
	if err != nil {
		m.failures.Add(1)
		m.log.Warn("ask jvm for its perf map", "pid", pid, "error", err)
		return false
	}
	m.attaches.Add(1)
	m.log.Debug("jvm wrote its perf map", "pid", pid, "took", d)
	if m.opts.Written != nil {
		m.opts.Written(pid)
	}
	return true
}

func (m *PerfMapper) perfmap(pid int) error {
	t, err := NewTarget(m.opts.ProcRoot, pid)
	if err != nil {
		return err
	}
	out, err := t.Command(m.opts.Timeout, "jcmd", "Compiler.perfmap")
	if err != nil {
		return err
	}
	// A JVM without the command answers status 0 with a message.
	if bytes.Contains([]byte(out), []byte("Unknown diagnostic command")) || bytes.Contains([]byte(out), []byte("not available")) {
		return fmt.Errorf("jvm %d has no Compiler.perfmap (JDK 17 or later has it): %s: %w", pid, bytes.TrimSpace([]byte(out)), ErrNoAttach)
	}
	return nil
}

// RefreshAll refreshes every JVM among pids (nil: every process), as a
// schedule does.
func (m *PerfMapper) RefreshAll(pids []uint32) {
	if pids == nil {
		ents, err := os.ReadDir(m.opts.ProcRoot)
		if err != nil {
			return
		}
		for _, e := range ents {
			if n, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
				pids = append(pids, uint32(n))
			}
		}
	}
	for _, pid := range pids {
		m.Refresh(pid)
	}
}

// Run refreshes the JVMs among pids() every interval until stop closes.
func (m *PerfMapper) Run(stop <-chan struct{}, every time.Duration, pids func() []uint32) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		m.RefreshAll(pids())
		select {
		case <-stop:
			return
		case <-tk.C:
		}
	}
}

// Forget drops what is known of pid.
func (m *PerfMapper) Forget(pid uint32) {
	m.mu.Lock()
	delete(m.jvms, pid)
	m.mu.Unlock()
}

// gone reports whether pid has no process any more.
func (m *PerfMapper) gone(pid uint32) bool {
	_, err := os.Stat(filepath.Join(m.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10)))
	return errors.Is(err, os.ErrNotExist)
}

func (m *PerfMapper) startTime(pid uint32) string {
	b, err := os.ReadFile(filepath.Join(m.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return ""
	}
	// comm, in parentheses, may hold spaces: fields count from its end.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		f := bytes.Fields(b[i+1:])
		if len(f) > 19 {
			return string(f[19])
		}
	}
	return ""
}

func (m *PerfMapper) mapsLibjvm(pid uint32) bool {
	f, err := os.Open(filepath.Join(m.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10), "maps"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if bytes.HasSuffix(sc.Bytes(), []byte("/libjvm.so")) {
			return true
		}
	}
	return false
}

func isNoAttach(err error) bool { return errors.Is(err, ErrNoAttach) }
