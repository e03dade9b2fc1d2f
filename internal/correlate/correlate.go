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
	"slices"
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
	// AttachLoader attaches the link-map event to a dynamic loader's
	// debugger hook (tracectx.LoaderHookSymbol), for every process of
	// that loader file.
	AttachLoader(path string, offset uint64) error
}

// Info is what correlate learnt of one process, for resource attributes.
type Info struct {
	ServiceName string
	Resource    map[string]string
	// AttributeKeys names the keys of the thread-context attributes
	// (threadlocal.attribute_key_map); nil when the process publishes none.
	AttributeKeys []string
	// Source names the context source configured ("thread", "elastic", "go",
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
	// ScansDropped counts scans not queued: the queue was full.
	ScansDropped uint64
	// LoadersAttached counts the loader files whose link-map changes
	// are seen (Kernel.AttachLoader); LoaderAttachErrors those where the
	// uprobe could not attach, whose processes are rescanned only in
	// their first seconds (Seen).
	LoadersAttached, LoaderAttachErrors uint64
	// LinkEvents counts the link-map changes handed to LinkMap;
	// LinkEventsEarly those of processes not scanned yet, whose first
	// scan reads the link map as it is then.
	LinkEvents, LinkEventsEarly uint64
	// LinkRescans counts the scans a link-map change asked for (at once
	// and the retries after it; of the Scanned); LinkFound those that
	// found a context source or process context the process did not
	// have configured before; LinkScanErrors those that failed.
	LinkRescans, LinkFound, LinkScanErrors uint64
	// ContextChecks counts the reads of a known process context's
	// header (every ContextCheckEvery); ContextUpdates those that found
	// it republished, which rescan the process; ContextCheckErrors those
	// that could not read it (gone or unmapped: rescanned too).
	ContextChecks, ContextUpdates, ContextCheckErrors uint64
}

// Why a scan is queued.
type reason uint8

const (
	firstScan   reason = iota // first sight, or a rescan of an unresolved process (Seen)
	linkScan                  // a link-map change or a retry after one
	contextScan               // the process context was republished
)

type scanReq struct {
	pid uint32
	why reason
}

// LinkRetries are the default delays after a link-map change at which the
// process is scanned once more, besides at once: glibc calls its debugger
// hook when the new object is in the link map (RT_CONSISTENT) but before
// it relocates it, so the GOT slots a scan reads may not be written yet
// at the first scan.
var LinkRetries = []time.Duration{100 * time.Millisecond, time.Second}

// ContextCheckEvery is how often the header of each known process
// context is read to tell an update (a 32-byte read per process that
// publishes one).
const ContextCheckEvery = 5 * time.Second

// Watcher scans processes on demand and keeps the kernel configured.
type Watcher struct {
	k   Kernel
	log *slog.Logger
	goc GoConfig
	// linkRetries: LinkRetries, read once by New, so the retry timers
	// read no package state.
	linkRetries []time.Duration

	mu    sync.Mutex
	procs map[uint32]*state
	hooks map[string]bool // hook file + offset already attached

	loaders map[string]bool // loader files (tracectx.Hook.File) attached or failed

	queue chan scanReq
	stats struct {
		scanned, configured, errors, hooks, unchanged, dropped atomic.Uint64
		loaders, loaderErrors, links, linksEarly               atomic.Uint64
		linkRescans, linkFound, linkErrors                     atomic.Uint64
		contextChecks, contextUpdates, contextErrors           atomic.Uint64
	}
	// loaderWarned: the fall back was logged.
	loaderWarned atomic.Bool
	seed         maphash.Seed
	// scanner remembers what each mapped file said, so libc is read once
	// and not once per process and scan.
	scanner *tracectx.Scanner
	// reads shares the tracker's read of a new process (nil: none).
	reads Reads

	// The reads of a process, replaced by tests.
	scan      func(pid int, r *tracectx.ProcRead) (*tracectx.ProcessInfo, error)
	readMaps  func(pid int) ([]byte, error)
	published func(pid int, addr uint64) (uint64, error)
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
	// cfg is the configuration the last scan wrote (zero: none), so a
	// rescan tells a new source.
	cfg bpf.SamplerProcConfig
	// ctxAddr, ctxPublished: the process context's header and the
	// monotonic_published_at_ns the last scan read (0: none).
	ctxAddr, ctxPublished uint64
	// ctxRescans counts the rescans Seen queued for a process that
	// publishes an OTEP 4947 thread context but no process context yet
	// (see awaitsContext).
	ctxRescans int
	// linkQueued: a scan for a link-map change is queued, not begun.
	linkQueued bool
	// linkAt is the last link-map change, linkStep the next of
	// LinkRetries after it, retry its timer (nil: none pending).
	linkAt   time.Time
	linkStep int
	retry    *time.Timer
}

// New returns a watcher; call Run to process the queue.
func New(k Kernel, goc GoConfig, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{k: k, goc: goc, log: log, procs: map[uint32]*state{},
		hooks: map[string]bool{}, loaders: map[string]bool{}, queue: make(chan scanReq, 4096),
		scanner: tracectx.NewScanner(1024), seed: maphash.MakeSeed(),
		readMaps: tracectx.ReadMaps, published: tracectx.ReadContextPublishedAt,
		linkRetries: slices.Clone(LinkRetries)}
	w.scan = w.scanner.ScanRead
	return w
}

// ShareReads has the scans take the /proc reads r made of a process just
// before, instead of reading maps, environ and exe again. Call it before
// Run.
func (w *Watcher) ShareReads(r Reads) { w.reads = r }

// Scan inspects pid now and configures the kernel. It is what the
// recording calls for its targets before sampling starts.
func (w *Watcher) Scan(pid uint32) error { return w.scanPID(pid, firstScan) }

func (w *Watcher) scanPID(pid uint32, why reason) error {
	w.mu.Lock()
	var prev scanSum
	var before bpf.SamplerProcConfig
	var beforeCtx uint64
	if st := w.procs[pid]; st != nil {
		if st.quiet {
			prev = scanSum{quiet: true, maps: st.mapsSum}
		}
		before, beforeCtx = st.cfg, st.ctxAddr
		if why == linkScan {
			st.linkQueued = false
		}
	}
	w.mu.Unlock()
	// A link-map change or an update came after any read the tracker
	// made: read the process as it is now.
	r, err := w.inspect(pid, prev, why != firstScan)
	w.stats.scanned.Add(1)
	if why == linkScan {
		w.stats.linkRescans.Add(1)
	}
	w.mu.Lock()
	st := w.procs[pid]
	if st == nil {
		st = &state{}
		w.procs[pid] = st
	}
	st.scannedAt = time.Now()
	st.scans++
	st.quiet, st.mapsSum = r.sum.quiet, r.sum.maps
	w.mu.Unlock()
	if err != nil {
		w.stats.errors.Add(1)
		if why == linkScan {
			w.stats.linkErrors.Add(1)
		}
		return err
	}
	if r.sum.unchanged {
		w.stats.unchanged.Add(1)
		return nil // st.info stays what the last scan found: nothing
	}
	if r.loader != nil {
		w.attachLoader(*r.loader)
	}
	for _, h := range r.hooks {
		w.attachHook(h)
	}
	cfg := r.cfg
	if why == linkScan && (cfg != before && cfg != (bpf.SamplerProcConfig{}) || r.ctxAddr != 0 && beforeCtx == 0) {
		w.stats.linkFound.Add(1)
	}
	if cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_NONE) || cfg.GoLayout != uint8(bpf.SamplerGoLabelLayoutGO_LABELS_NONE) ||
		cfg.Node.TlsKind != uint8(bpf.SamplerTlsKindTLS_NONE) ||
		cfg.ElasticKind != uint8(bpf.SamplerTlsKindTLS_NONE) {
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
	} else if before != (bpf.SamplerProcConfig{}) {
		// A rescan found the source gone (the library unloaded): the
		// programs stop reading where it was.
		w.mu.Lock()
		configured := st.configured
		st.configured = false
		w.mu.Unlock()
		if configured {
			_ = w.k.DeleteProcConfig(pid)
		}
	}
	w.mu.Lock()
	st.info = r.info
	st.resolved = r.info.Source != ""
	st.cfg = cfg
	st.ctxAddr, st.ctxPublished = r.ctxAddr, r.ctxPublished
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

// inspected is what one scan found.
type inspected struct {
	info   Info
	cfg    bpf.SamplerProcConfig
	hooks  []tracectx.Hook
	loader *tracectx.Hook
	sum    scanSum
	// ctxAddr, ctxPublished: the process context's header and its
	// monotonic_published_at_ns (0: none).
	ctxAddr, ctxPublished uint64
}

// inspect scans pid; fresh reads /proc even when the tracker has a
// recent read of it.
func (w *Watcher) inspect(pid uint32, prev scanSum, fresh bool) (inspected, error) {
	var cfg bpf.SamplerProcConfig
	var pr *tracectx.ProcRead
	if w.reads != nil && !fresh {
		pr = w.reads.ProcRead(pid)
	}
	if pr == nil {
		maps, err := w.readMaps(int(pid))
		if err != nil {
			return inspected{}, fmt.Errorf("scan pid %d: %w", pid, err)
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
		return inspected{sum: sum}, nil
	}
	pi, err := w.scan(int(pid), pr)
	if err != nil {
		return inspected{}, fmt.Errorf("scan pid %d: %w", pid, err)
	}
	for _, e := range pi.Errors {
		w.log.Debug("scan", "pid", pid, "error", e)
	}
	info := Info{ServiceName: pi.ServiceName, Resource: pi.Resource, AttributeKeys: pi.AttributeKeyMap}
	cfg.TlsKind, cfg.TlsOffset, cfg.TlsModule = tlsConfig(pi.ThreadContext)
	if cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_NONE) {
		info.Source = "thread"
	}
	if nc, ok := nodeConfig(pi.NodeContext); ok {
		cfg.Node = nc
		if info.Source == "" {
			info.Source = "node"
		}
	}
	cfg.ElasticKind, cfg.ElasticOffset, cfg.ElasticModule = tlsConfig(pi.ElasticContext)
	if cfg.ElasticKind != uint8(bpf.SamplerTlsKindTLS_NONE) && info.Source == "" {
		info.Source = "elastic"
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
	return inspected{info: info, cfg: cfg, hooks: pi.Hooks, loader: pi.Loader, sum: sum,
		ctxAddr: pi.ContextAddr, ctxPublished: pi.ContextPublishedAt}, nil
}

// nodeConfig is the proc_config part of the Node.js walk (bpf/lib/nodectx.h),
// with the layout tracectx.DefaultNodeLayout reads; false when the process
// has no discovery struct or it is where the walk does not read (musl).
func nodeConfig(l tracectx.Location) (nc bpf.SamplerNodeCtxConfig, ok bool) {
	if l.Kind == tracectx.LocationDTV && l.Musl {
		return nc, false
	}
	nc.TlsKind, nc.TlsOffset, nc.TlsModule = tlsConfig(l)
	if nc.TlsKind == uint8(bpf.SamplerTlsKindTLS_NONE) {
		return nc, false
	}
	lay := tracectx.DefaultNodeLayout()
	nc.WrappedOff = uint32(lay.WrappedObject)
	nc.MapTableOff = uint32(lay.JSMapTable)
	nc.RecordSlot = int32(lay.RecordSlot)
	return nc, true
}

// tlsConfig is how the sampler reaches a TLS variable at l (enum
// tls_kind, the offset and the DTV module): TLS_NONE where l locates
// nothing.
func tlsConfig(l tracectx.Location) (kind uint8, offset int64, module uint64) {
	switch l.Kind {
	case tracectx.LocationStaticTP:
		return uint8(bpf.SamplerTlsKindTLS_STATIC_TP), l.Offset, 0
	case tracectx.LocationDTV:
		if l.Musl {
			return uint8(bpf.SamplerTlsKindTLS_DTV_MUSL), l.Offset, l.ModuleID
		}
		return uint8(bpf.SamplerTlsKindTLS_DTV), l.Offset, l.ModuleID
	}
	return uint8(bpf.SamplerTlsKindTLS_NONE), 0, 0
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

// attachLoader has the kernel tell the link-map changes of every process
// of loader l's file, once per file.
func (w *Watcher) attachLoader(l tracectx.Hook) {
	key := l.File
	if key == "" {
		key = l.OpenPath
	}
	w.mu.Lock()
	done := w.loaders[key]
	w.loaders[key] = true
	w.mu.Unlock()
	if done {
		return
	}
	if err := w.k.AttachLoader(l.OpenPath, l.Offset); err != nil {
		w.stats.loaderErrors.Add(1)
		if !w.loaderWarned.Swap(true) {
			w.log.Warn("libraries loaded late are not seen: the dynamic loader's hook could not be watched; its processes are rescanned only in their first seconds",
				"loader", l.Path, "symbol", tracectx.LoaderHookSymbol, "error", err)
		}
		return
	}
	w.stats.loaders.Add(1)
	w.log.Debug("watching library loads", "loader", l.Path)
}

// WatchLoaders attaches the link-map event to the loader files at paths
// that exist (tracectx.SystemLoaders), before any process is scanned:
// attaching a uprobe takes privileges the commands drop once started, so
// a loader first met in a scan after that cannot be watched any more
// (counted, LoaderAttachErrors). A loader of another file (a container's)
// is attached as its processes are scanned, where that still can be.
func (w *Watcher) WatchLoaders(paths []string) {
	for _, p := range paths {
		l, err := tracectx.LoaderAt(p)
		if errors.Is(err, unix.ENOENT) {
			continue // not this system's
		}
		if err != nil {
			w.log.Debug("dynamic loader not watched", "path", p, "error", err)
			continue
		}
		w.attachLoader(*l)
	}
}

// LinkMap tells the watcher that pid's dynamic loader changed its link
// map (a library loaded or unloaded): the process is scanned at once and
// again after each of LinkRetries, counted from the last change. A
// process not scanned yet is left to its first scan.
func (w *Watcher) LinkMap(pid uint32) {
	w.stats.links.Add(1)
	w.mu.Lock()
	st := w.procs[pid]
	if st == nil || st.exited || st.scans == 0 {
		w.mu.Unlock()
		w.stats.linksEarly.Add(1)
		return
	}
	st.linkAt, st.linkStep = time.Now(), 0
	queue := !st.linkQueued
	st.linkQueued = true
	if st.retry == nil && len(w.linkRetries) > 0 {
		st.retry = time.AfterFunc(w.linkRetries[0], func() { w.linkRetry(pid, st) })
	}
	w.mu.Unlock()
	if queue {
		w.enqueue(scanReq{pid, linkScan})
	}
}

// linkRetry queues the retry of st due now, and arms the next one; a
// later change has pushed the retries back.
func (w *Watcher) linkRetry(pid uint32, st *state) {
	w.mu.Lock()
	if w.procs[pid] != st || st.exited || st.linkStep >= len(w.linkRetries) {
		st.retry = nil
		w.mu.Unlock()
		return
	}
	now := time.Now()
	if due := st.linkAt.Add(w.linkRetries[st.linkStep]); now.Before(due) {
		st.retry.Reset(due.Sub(now))
		w.mu.Unlock()
		return
	}
	st.linkStep++
	if st.linkStep < len(w.linkRetries) {
		st.retry.Reset(st.linkAt.Add(w.linkRetries[st.linkStep]).Sub(now))
	} else {
		st.retry = nil
	}
	queue := !st.linkQueued
	st.linkQueued = true
	w.mu.Unlock()
	if queue {
		w.enqueue(scanReq{pid, linkScan})
	}
}

// checkContexts reads the header of every known process context and
// rescans the processes whose context was republished (or is gone).
func (w *Watcher) checkContexts() {
	type known struct {
		pid             uint32
		addr, published uint64
	}
	var ks []known
	w.mu.Lock()
	for pid, st := range w.procs {
		if st.ctxAddr != 0 && !st.exited {
			ks = append(ks, known{pid, st.ctxAddr, st.ctxPublished})
		}
	}
	w.mu.Unlock()
	for _, k := range ks {
		w.stats.contextChecks.Add(1)
		p, err := w.published(int(k.pid), k.addr)
		switch {
		case err != nil:
			w.stats.contextErrors.Add(1)
			w.log.Debug("read process context header", "pid", k.pid, "error", err)
		case p == 0 || p == k.published:
			continue // being updated (the next check reads it), or unchanged
		default:
			w.stats.contextUpdates.Add(1)
		}
		w.enqueue(scanReq{k.pid, contextScan})
	}
}

// enqueue queues a scan, counting it when the queue is full.
func (w *Watcher) enqueue(r scanReq) {
	select {
	case w.queue <- r:
	default:
		w.stats.dropped.Add(1)
		if r.why == linkScan {
			w.mu.Lock()
			if st := w.procs[r.pid]; st != nil {
				st.linkQueued = false
			}
			w.mu.Unlock()
		}
	}
}

// Seen queues pid for a scan if it was never scanned, or if it was
// scanned without finding a context source more than rescan ago (a
// library may have been loaded since, or relocation was not done yet),
// or if it awaits its process context (awaitsContext) since more than
// rescan ago.
func (w *Watcher) Seen(pid uint32, rescan time.Duration) {
	w.mu.Lock()
	st := w.procs[pid]
	due := st == nil || (!st.resolved && st.scans < 5 && time.Since(st.scannedAt) > rescan)
	awaits := st != nil && awaitsContext(st) && st.ctxRescans < maxContextRescans && time.Since(st.scannedAt) > rescan
	if awaits {
		st.ctxRescans++
	}
	if due || awaits {
		if st == nil {
			st = &state{}
			w.procs[pid] = st
		}
		st.scannedAt = time.Now() // do not queue it again meanwhile
	}
	w.mu.Unlock()
	if due || awaits {
		w.enqueue(scanReq{pid, firstScan})
	}
}

// maxContextRescans bounds the rescans of a process awaiting its process
// context: a writer that publishes none is rescanned that often, no more.
const maxContextRescans = 5

// awaitsContext: the process publishes an OTEP 4947 thread context (a TLS
// variable) but no process context was found, so its records' attributes
// have no key map to name them. A writer in a library loaded late
// publishes its process context after the load (ddtrace's extension is
// dlopen'ed by an import, the tracer publishes the context as it starts):
// the scan the load triggered found the variable before the context.
func awaitsContext(st *state) bool {
	return st.resolved && !st.exited && st.ctxAddr == 0 && st.cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_NONE)
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
		ScanErrors: w.stats.errors.Load(), HooksAttached: w.stats.hooks.Load(), Unchanged: w.stats.unchanged.Load(),
		ScansDropped:    w.stats.dropped.Load(),
		LoadersAttached: w.stats.loaders.Load(), LoaderAttachErrors: w.stats.loaderErrors.Load(),
		LinkEvents: w.stats.links.Load(), LinkEventsEarly: w.stats.linksEarly.Load(),
		LinkRescans: w.stats.linkRescans.Load(), LinkFound: w.stats.linkFound.Load(), LinkScanErrors: w.stats.linkErrors.Load(),
		ContextChecks: w.stats.contextChecks.Load(), ContextUpdates: w.stats.contextUpdates.Load(),
		ContextCheckErrors: w.stats.contextErrors.Load()}
}

// Run scans queued processes, and checks the known process contexts
// every ContextCheckEvery, until stop is closed.
func (w *Watcher) Run(stop <-chan struct{}) {
	tick := time.NewTicker(ContextCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			w.checkContexts()
		case r := <-w.queue:
			if err := w.scanPID(r.pid, r.why); err != nil {
				w.log.Debug("scan", "pid", r.pid, "error", err)
			}
		}
	}
}
