// Package correlate tells the eBPF sampler, per process, where that
// process publishes the trace context of the running thread or goroutine:
// it scans processes (internal/tracectx), writes a proc_config entry for
// the sampler, attaches the uprobe writer to binaries that export
// spanprof_set_trace_context, and keeps the resource attributes the
// process context names.
package correlate

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// Kernel is the part of the sampler correlate writes to.
type Kernel interface {
	SetProcConfig(pid uint32, cfg bpf.SamplerProcConfig) error
	DeleteProcConfig(pid uint32) error
	AttachHook(path string, offset uint64) error
}

// Info is what correlate learnt of one process, for resource attributes.
type Info struct {
	ServiceName string
	Resource    map[string]string
	// AttributeKeys names the keys of the thread-context attributes
	// (threadlocal.attribute_key_map); nil when the process publishes none.
	AttributeKeys []string
	// Source names the context source configured ("thread", "go",
	// "hook"), empty when none.
	Source string
}

// GoConfig fills the Go part of a proc_config for a Go executable; it
// returns an error for binaries that are not Go or whose runtime layout is
// unknown. exe is the stat of /proc/PID/exe when the caller has it (nil:
// stat it). Nil disables goroutine-label correlation.
type GoConfig func(pid int, exe *unix.Stat_t) (bpf.SamplerProcConfig, error)

// Reads hands over what a read of /proc/PID made just before the scan
// saw (proc.Tracker's ProcRead), so a new process is read once; nil when
// there is none, and the scan reads /proc itself.
type Reads interface {
	ProcRead(pid uint32) *tracectx.ProcRead
}

// Stats counts what the watcher did.
type Stats struct {
	Scanned, Configured, ScanErrors, HooksAttached uint64
	// Unchanged counts the rescans (of the Scanned) that stopped at the
	// maps: the same as at a scan that found nothing and no error.
	Unchanged uint64
}

// Watcher scans processes on demand and keeps the kernel configured.
type Watcher struct {
	k   Kernel
	log *slog.Logger
	goc GoConfig

	mu    sync.Mutex
	procs map[uint32]*state
	hooks map[string]bool // hook file + offset already attached

	queue chan uint32
	stats struct{ scanned, configured, errors, hooks, unchanged atomic.Uint64 }
	seed  maphash.Seed
	// scanner remembers what each mapped file said, so libc is read once
	// and not once per process and scan.
	scanner *tracectx.Scanner
	// reads shares the tracker's read of a new process (nil: none).
	reads Reads
}

type state struct {
	info      Info
	scannedAt time.Time
	scans     int
	resolved  bool // a context source was configured
	// configured: the programs hold a proc_config for the pid, which an
	// exec or exit deletes. Most processes have none, and a map delete per
	// exec was a twentieth of the agent's work under process churn.
	configured bool
	exited     bool
	exitedAt   time.Time // when Exit marked it
	// quiet: the last scan found nothing and met no error, with the maps
	// text summed in mapsSum.
	quiet   bool
	mapsSum uint64
}

// New returns a watcher; call Run to process the queue.
func New(k Kernel, goc GoConfig, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{k: k, goc: goc, log: log, procs: map[uint32]*state{},
		hooks: map[string]bool{}, queue: make(chan uint32, 4096), scanner: tracectx.NewScanner(1024),
		seed: maphash.MakeSeed()}
}

// ShareReads has the scans take the /proc reads r made of a process just
// before, instead of reading maps, environ and exe again. Call it before
// Run.
func (w *Watcher) ShareReads(r Reads) { w.reads = r }

// Scan inspects pid now and configures the kernel. It is what the
// recording calls for its targets before sampling starts.
func (w *Watcher) Scan(pid uint32) error {
	w.mu.Lock()
	var prev scanSum
	if st := w.procs[pid]; st != nil && st.quiet {
		prev = scanSum{quiet: true, maps: st.mapsSum}
	}
	w.mu.Unlock()
	info, cfg, hooks, sum, err := w.inspect(pid, prev)
	w.stats.scanned.Add(1)
	w.mu.Lock()
	st := w.procs[pid]
	if st == nil {
		st = &state{}
		w.procs[pid] = st
	}
	st.scannedAt = time.Now()
	st.scans++
	st.quiet, st.mapsSum = sum.quiet, sum.maps
	w.mu.Unlock()
	if err != nil {
		w.stats.errors.Add(1)
		return err
	}
	if sum.unchanged {
		w.stats.unchanged.Add(1)
		return nil // st.info stays what the last scan found: nothing
	}
	for _, h := range hooks {
		w.attachHook(h)
	}
	if cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_NONE) || cfg.GoLayout != uint8(bpf.SamplerGoLabelLayoutGO_LABELS_NONE) {
		// Marked before the write: an exec or exit that comes while it is
		// under way then deletes what it wrote.
		w.mu.Lock()
		st.configured = true
		w.mu.Unlock()
		if err := w.k.SetProcConfig(pid, cfg); err != nil {
			return fmt.Errorf("configure pid %d: %w", pid, err)
		}
		w.mu.Lock()
		stale := w.procs[pid] != st || st.exited
		w.mu.Unlock()
		if stale {
			// The pid exec'd or exited during the scan, before this
			// write: the configuration is of an image gone. (Scans run
			// one at a time, so it is no newer scan's.)
			_ = w.k.DeleteProcConfig(pid)
			return nil
		}
		w.stats.configured.Add(1)
	}
	w.mu.Lock()
	st.info = info
	st.resolved = info.Source != ""
	w.mu.Unlock()
	return nil
}

// scanSum is what tells a rescan that would find what the last scan
// found: quiet, the last scan found nothing and met no error, and maps,
// the sum of the maps text it read. unchanged: this scan stopped there.
type scanSum struct {
	quiet, unchanged bool
	maps             uint64
}

func (w *Watcher) inspect(pid uint32, prev scanSum) (Info, bpf.SamplerProcConfig, []tracectx.Hook, scanSum, error) {
	var cfg bpf.SamplerProcConfig
	var pr *tracectx.ProcRead
	if w.reads != nil {
		pr = w.reads.ProcRead(pid)
	}
	if pr == nil {
		maps, err := tracectx.ReadMaps(int(pid))
		if err != nil {
			return Info{}, cfg, nil, scanSum{}, fmt.Errorf("scan pid %d: %w", pid, err)
		}
		pr = &tracectx.ProcRead{Maps: maps} // the rest read by the scan
	}
	sum := scanSum{maps: maphash.Bytes(w.seed, pr.Maps)}
	if prev.quiet && prev.maps == sum.maps {
		// The same files at the same places as at a scan that found no
		// context source, no process context and no error: the scan
		// would read the same modules (remembered per file version),
		// and the environment and executable do not change without an
		// exec, which forgets the state. A rescan waits for a library
		// or a process context to be mapped, which changes the maps.
		sum.quiet, sum.unchanged = true, true
		return Info{}, cfg, nil, sum, nil
	}
	pi, err := w.scanner.ScanRead(int(pid), pr)
	if err != nil {
		return Info{}, cfg, nil, scanSum{}, fmt.Errorf("scan pid %d: %w", pid, err)
	}
	for _, e := range pi.Errors {
		w.log.Debug("scan", "pid", pid, "error", e)
	}
	info := Info{ServiceName: pi.ServiceName, Resource: pi.Resource, AttributeKeys: pi.AttributeKeyMap}
	switch pi.ThreadContext.Kind {
	case tracectx.LocationStaticTP:
		cfg.TlsKind = uint8(bpf.SamplerTlsKindTLS_STATIC_TP)
		cfg.TlsOffset = pi.ThreadContext.Offset
		info.Source = "thread"
	case tracectx.LocationDTV:
		cfg.TlsKind = uint8(bpf.SamplerTlsKindTLS_DTV)
		if pi.ThreadContext.Musl {
			cfg.TlsKind = uint8(bpf.SamplerTlsKindTLS_DTV_MUSL)
		}
		cfg.TlsOffset = pi.ThreadContext.Offset
		cfg.TlsModule = pi.ThreadContext.ModuleID
		info.Source = "thread"
	}
	goQuiet := true // no Go check
	if w.goc != nil {
		var exe *unix.Stat_t
		if pr != nil && pr.Exe != nil {
			exe = pr.Exe
		}
		g, err := w.goc(int(pid), exe)
		goQuiet = errors.Is(err, ErrNotGo)
		if err == nil {
			cfg.GoLayout = g.GoLayout
			cfg.GoTlsG = g.GoTlsG
			cfg.GoOffM = g.GoOffM
			cfg.GoOffCurg = g.GoOffCurg
			cfg.GoOffLabels = g.GoOffLabels
			cfg.GoOffLockedg = g.GoOffLockedg
			if info.Source == "" {
				info.Source = "go"
			}
		} else if !errors.Is(err, ErrNotGo) {
			w.log.Debug("go labels", "pid", pid, "error", err)
		}
	}
	if len(pi.Hooks) > 0 && info.Source == "" {
		info.Source = "hook"
	}
	// A mapping named for a process context whose header is not written
	// yet reads as none and no error; its maps then stay the same while
	// it is published, so such a process is never quiet.
	sum.quiet = info.Source == "" && len(pi.Errors) == 0 && pi.Resource == nil && goQuiet &&
		!bytes.Contains(pr.Maps, []byte("OTEL_CTX"))
	return info, cfg, pi.Hooks, sum, nil
}

// ErrNotGo is what a GoConfig returns for a binary that is not Go.
var ErrNotGo = errors.New("not a Go binary")

func (w *Watcher) attachHook(h tracectx.Hook) {
	key := fmt.Sprintf("%s@%#x", h.OpenPath, h.Offset)
	w.mu.Lock()
	done := w.hooks[key]
	w.hooks[key] = true
	w.mu.Unlock()
	if done {
		return
	}
	if err := w.k.AttachHook(h.OpenPath, h.Offset); err != nil {
		w.log.Warn("attach spanprof_set_trace_context uprobe", "path", h.Path, "error", err)
		return
	}
	w.stats.hooks.Add(1)
}

// Seen queues pid for a scan if it was never scanned, or if it was
// scanned without finding a context source more than rescan ago (a
// library may have been loaded since, or relocation was not done yet).
func (w *Watcher) Seen(pid uint32, rescan time.Duration) {
	w.mu.Lock()
	st := w.procs[pid]
	due := st == nil || (!st.resolved && st.scans < 5 && time.Since(st.scannedAt) > rescan)
	if due {
		if st == nil {
			st = &state{}
			w.procs[pid] = st
		}
		st.scannedAt = time.Now() // do not queue it again meanwhile
	}
	w.mu.Unlock()
	if due {
		select {
		case w.queue <- pid:
		default:
		}
	}
}

// Exec forgets pid: its image changed, scan it again.
func (w *Watcher) Exec(pid uint32) {
	w.mu.Lock()
	st := w.procs[pid]
	configured := st != nil && st.configured
	delete(w.procs, pid)
	w.mu.Unlock()
	if configured {
		_ = w.k.DeleteProcConfig(pid)
	}
}

// Exit stops reading pid's context but keeps what it published (service
// name, resource attributes) until ForgetExited, so samples taken before
// the exit still get their resource.
func (w *Watcher) Exit(pid uint32) {
	w.mu.Lock()
	st, ok := w.procs[pid]
	configured := ok && st.configured
	if ok {
		st.exited, st.exitedAt = true, time.Now()
		st.configured = false
	}
	w.mu.Unlock()
	if configured {
		_ = w.k.DeleteProcConfig(pid)
	}
}

// ForgetExited drops what is known of the processes whose exit was
// handled before before; call it after each report.
func (w *Watcher) ForgetExited(before time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pid, st := range w.procs {
		if st.exited && !st.exitedAt.After(before) {
			delete(w.procs, pid)
		}
	}
}

// Info returns what is known of pid.
func (w *Watcher) Info(pid uint32) (Info, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.procs[pid]
	if !ok {
		return Info{}, false
	}
	return st.info, true
}

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Scanned: w.stats.scanned.Load(), Configured: w.stats.configured.Load(),
		ScanErrors: w.stats.errors.Load(), HooksAttached: w.stats.hooks.Load(), Unchanged: w.stats.unchanged.Load()}
}

// Run scans queued processes until stop is closed.
func (w *Watcher) Run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case pid := <-w.queue:
			if err := w.Scan(pid); err != nil {
				w.log.Debug("scan", "pid", pid, "error", err)
			}
		}
	}
}
