package correlate

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// fakeProc is one process as the watcher's reads see it: its maps text
// and what a scan of it finds, which the test changes as the process
// loads a library or republishes its process context.
type fakeProc struct {
	mu        sync.Mutex
	maps      string
	info      tracectx.ProcessInfo
	published uint64 // the process context header's value now
	scans     int
}

func (p *fakeProc) set(fn func(p *fakeProc)) { p.mu.Lock(); fn(p); p.mu.Unlock() }

// fakeWatcher is a watcher whose reads of pid 42 go to p.
func fakeWatcher(t *testing.T, k *fakeKernel, p *fakeProc) *Watcher {
	t.Helper()
	w := New(k, nil, nil)
	w.readMaps = func(pid int) ([]byte, error) {
		if pid != 42 {
			return nil, errors.New("no such process")
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return []byte(p.maps), nil
	}
	w.scan = func(pid int, _ *tracectx.ProcRead) (*tracectx.ProcessInfo, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.scans++
		info := p.info
		return &info, nil
	}
	w.published = func(pid int, addr uint64) (uint64, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if addr != p.info.ContextAddr {
			return 0, tracectx.ErrNoProcessContext
		}
		return p.published, nil
	}
	return w
}

// drain runs the scans queued now, as Run would.
func drain(w *Watcher) int {
	n := 0
	for {
		select {
		case r := <-w.queue:
			_ = w.scanPID(r.pid, r.why)
			n++
		default:
			return n
		}
	}
}

var loader = &tracectx.Hook{Path: "/lib/ld.so", OpenPath: "/proc/42/root/lib/ld.so", Offset: 0x2060, File: "fd:01 7"}

// TestLinkMapFindsLateLibrary: a process scanned without a source, whose
// rescans of its first seconds are over, loads a library that defines
// the thread-context variable; the link-map change rescans it at once
// and the configuration is written. The loader is attached once.
func TestLinkMapFindsLateLibrary(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	p := &fakeProc{maps: "exe ld.so libc", info: tracectx.ProcessInfo{Loader: loader}}
	w := fakeWatcher(t, k, p)
	if err := w.Scan(42); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.procs[42].scans = 5 // Seen queues no more rescans
	w.mu.Unlock()
	w.Seen(42, 0)
	if n := drain(w); n != 0 {
		t.Fatalf("Seen queued %d scans after the first seconds' rescans, want 0", n)
	}
	if len(k.loaders) != 1 || k.loaders[0] != loader.OpenPath {
		t.Fatalf("loaders attached %v, want [%s]", k.loaders, loader.OpenPath)
	}

	p.set(func(p *fakeProc) {
		p.maps += " libctx.so"
		p.info.ThreadContext = tracectx.Location{Kind: tracectx.LocationDTV, Offset: 16, ModuleID: 3}
		p.info.ThreadContextModule = "/app/libctx.so"
	})
	w.LinkMap(42)
	w.LinkMap(42) // RT_ADD and RT_CONSISTENT: one scan
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans after two link-map changes, want 1", n)
	}
	cfg, ok := k.configs[42]
	if !ok || cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_DTV) || cfg.TlsOffset != 16 || cfg.TlsModule != 3 {
		t.Fatalf("configuration %+v (written %v), want DTV module 3 offset 16", cfg, ok)
	}
	if info, _ := w.Info(42); info.Source != "thread" {
		t.Fatalf("source %q, want thread", info.Source)
	}
	st := w.Stats()
	if st.LinkEvents != 2 || st.LinkRescans != 1 || st.LinkFound != 1 || st.LinkEventsEarly != 0 || st.LoadersAttached != 1 {
		t.Fatalf("stats %+v: want 2 link events, 1 link rescan that found a source, 1 loader", st)
	}
	if len(k.loaders) != 1 {
		t.Fatalf("loader attached %d times, want once", len(k.loaders))
	}
}

// TestLinkMapRetries: glibc calls its hook before it relocates the new
// object, so a link-map change is followed by a scan at once and one
// after each of LinkRetries, counted from the last change; a process
// not scanned yet and one that exec'd are left alone.
func TestLinkMapRetries(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	// The first scan after the load meets the unrelocated slot: an
	// error, so the retry is not stopped by the unchanged maps.
	p := &fakeProc{maps: "exe ld.so libctx.so", info: tracectx.ProcessInfo{Errors: []error{errors.New("slot not relocated")}}}
	w := fakeWatcher(t, k, p)
	w.linkRetries = []time.Duration{20 * time.Millisecond, 60 * time.Millisecond}
	if err := w.Scan(42); err != nil {
		t.Fatal(err)
	}
	w.LinkMap(7) // never scanned
	w.LinkMap(42)
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans at the change, want 1", n)
	}
	p.set(func(p *fakeProc) {
		p.info.Errors = nil
		p.info.ThreadContext = tracectx.Location{Kind: tracectx.LocationStaticTP, Offset: -64}
	})
	time.Sleep(40 * time.Millisecond)
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans at the first retry, want 1", n)
	}
	if cfg := k.configs[42]; cfg.TlsKind != uint8(bpf.SamplerTlsKindTLS_STATIC_TP) {
		t.Fatalf("configuration after the retry %+v, want static TLS", cfg)
	}
	time.Sleep(60 * time.Millisecond)
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans at the second retry, want 1", n)
	}
	time.Sleep(80 * time.Millisecond)
	if n := drain(w); n != 0 {
		t.Fatalf("%d scans after the retries, want 0", n)
	}
	st := w.Stats()
	if st.LinkEvents != 2 || st.LinkEventsEarly != 1 || st.LinkRescans != 3 || st.LinkFound != 1 {
		t.Fatalf("stats %+v: want 2 events (1 early), 3 link rescans, 1 found", st)
	}

	// An exec forgets the process: a retry still armed scans nothing.
	w.LinkMap(42)
	drain(w)
	w.Exec(42)
	time.Sleep(100 * time.Millisecond)
	if n := drain(w); n != 0 {
		t.Fatalf("%d scans after the exec, want 0", n)
	}
}

// TestContextCheck: the header of a known process context is read every
// check; a changed monotonic_published_at_ns rescans the process, whose
// new resource is then the one named; an unchanged one, or one being
// updated (0), costs no scan; a header gone rescans, and the rescan
// finds no context.
func TestContextCheck(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	p := &fakeProc{maps: "exe OTEL_CTX", published: 100, info: tracectx.ProcessInfo{
		ServiceName: "checkout", Resource: map[string]string{"service.name": "checkout"},
		ContextAddr: 0x1000, ContextPublishedAt: 100}}
	w := fakeWatcher(t, k, p)
	if err := w.Scan(42); err != nil {
		t.Fatal(err)
	}
	w.checkContexts()
	if n := drain(w); n != 0 {
		t.Fatalf("%d scans for an unchanged context, want 0", n)
	}
	p.set(func(p *fakeProc) { p.published = 0 }) // an update under way
	w.checkContexts()
	if n := drain(w); n != 0 {
		t.Fatalf("%d scans while an update is under way, want 0", n)
	}
	p.set(func(p *fakeProc) {
		p.published = 250
		p.info.ServiceName, p.info.ContextPublishedAt = "checkout-v2", 250
		p.info.Resource = map[string]string{"service.name": "checkout-v2"}
	})
	w.checkContexts()
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans for a republished context, want 1", n)
	}
	if info, _ := w.Info(42); info.ServiceName != "checkout-v2" || info.Resource["service.name"] != "checkout-v2" {
		t.Fatalf("info after the update %+v, want service checkout-v2", info)
	}
	w.checkContexts()
	if n := drain(w); n != 0 {
		t.Fatalf("%d scans after the update was read, want 0", n)
	}
	p.set(func(p *fakeProc) { p.info = tracectx.ProcessInfo{} }) // unmapped
	w.checkContexts()
	if n := drain(w); n != 1 {
		t.Fatalf("%d scans for a context gone, want 1", n)
	}
	w.checkContexts() // none known any more: nothing read
	st := w.Stats()
	if st.ContextChecks != 5 || st.ContextUpdates != 1 || st.ContextCheckErrors != 1 {
		t.Fatalf("stats %+v: want 5 checks, 1 update, 1 unreadable", st)
	}
	// An exited process is not checked.
	p.set(func(p *fakeProc) { p.info.ContextAddr, p.info.ContextPublishedAt = 0x1000, 250 })
	_ = w.Scan(42)
	w.Exit(42)
	w.checkContexts()
	if st := w.Stats(); st.ContextChecks != 5 {
		t.Fatalf("%d checks after the exit, want 5", st.ContextChecks)
	}
}

// TestLoaderAttachFailure: a loader whose hook cannot be watched is
// counted, tried once per file, and its processes keep their rescans.
func TestLoaderAttachFailure(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}, loaderErr: errors.New("uprobe: not supported")}
	p := &fakeProc{maps: "exe ld.so", info: tracectx.ProcessInfo{Loader: loader}}
	w := fakeWatcher(t, k, p)
	for range 2 {
		p.set(func(p *fakeProc) { p.maps += " x" })
		if err := w.Scan(42); err != nil {
			t.Fatal(err)
		}
	}
	if st := w.Stats(); st.LoaderAttachErrors != 1 || st.LoadersAttached != 0 || len(k.loaders) != 1 {
		t.Fatalf("stats %+v, %d attach tries: want 1 failed try", st, len(k.loaders))
	}
	w.Seen(42, 0)
	if n := drain(w); n != 1 {
		t.Fatalf("%d rescans of an unresolved process, want 1", n)
	}
}

// TestLinkMapUnload: a rescan after a library holding the source was
// unloaded deletes the kernel's configuration, so nothing reads where the
// variable was.
func TestLinkMapUnload(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	p := &fakeProc{maps: "exe ld.so libctx.so", info: tracectx.ProcessInfo{
		ThreadContext: tracectx.Location{Kind: tracectx.LocationDTV, Offset: 16, ModuleID: 3}}}
	w := fakeWatcher(t, k, p)
	if err := w.Scan(42); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.configs[42]; !ok {
		t.Fatal("no configuration written for the source")
	}
	p.set(func(p *fakeProc) { p.maps, p.info = "exe ld.so", tracectx.ProcessInfo{} })
	w.LinkMap(42)
	drain(w)
	if cfg, ok := k.configs[42]; ok {
		t.Fatalf("configuration %+v kept after the library holding the source was unloaded", cfg)
	}
	if info, _ := w.Info(42); info.Source != "" {
		t.Fatalf("source %q after the unload, want none", info.Source)
	}
}
