// Package collect turns decoded kernel records into a symbolized
// profile.Profile: it reads process mappings at first sight, recovers the
// caller of frameless leaf functions, and symbolizes user and kernel
// frames when the profile is built.
package collect

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/perfmap"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

// LeafFixer recovers the return address a frame-pointer walk lost because
// the sampled function had not set up (or had already torn down) its
// frame. m is p's mapping of ip, a file (p.OpenPath(m) reads it).
type LeafFixer interface {
	RecoverCaller(p *proc.Process, m *proc.Mapping, ip, sp uint64, stackTop []byte) (ra uint64, ok bool)
}

// LRLeafFixer recovers the caller of a frameless leaf on arm64 from the
// link register the sample carries, where LeafFixer reads x86-64's stack.
type LRLeafFixer interface {
	RecoverCallerLR(p *proc.Process, m *proc.Mapping, ip, lr uint64) (ra uint64, ok bool)
}

// linkRegister: the samples are arm64's, whose return addresses start in
// the link register rather than on the stack.
var linkRegister = runtime.GOARCH == "arm64"

// arm64Hybrid turns on the hybrid walk for arm64 samples: on unless
// SPANPROF_ARM64_HYBRID=0, which leaves arm64 stacks to the kernel's
// frame-record chain and the leaf's caller from the link register (the
// walk before 2026-12-04, docs/unwinding.md).
var arm64Hybrid = os.Getenv("SPANPROF_ARM64_HYBRID") != "0"

// SizesWindows says whether the collector unwinds user stacks in the
// window the kernel copies, and so sizes each process's window
// (Options.StackWindow): on x86-64, and on arm64 with arm64Hybrid, where
// the walk takes the sampled frame's caller from the link register where
// its rules say.
var SizesWindows = !linkRegister || arm64Hybrid

// StackUnwinder is a LeafFixer that unwinds whole user stacks: frames
// without a frame pointer by their CFA rules in the record's stack window,
// the others from the kernel's chain, checked frame by frame
// (unwind.Walk). CFILeafFixer is one; a LeafFixer that is not has only
// the sampled frame's caller put back.
type StackUnwinder interface {
	Unwind(p *proc.Process, r *sampler.Record, dst []uint64) ([]uint64, unwind.Result)
}

// KernelSymbols resolves kernel addresses to frames of the kernel image or
// a module (symbolize.Kallsyms).
type KernelSymbols interface {
	Frames(dst []profile.Frame, addr uint64) []profile.Frame
}

// Options configure a Collector.
type Options struct {
	Frequency  int
	Tracker    *proc.Tracker
	Symbolizer *symbolize.Symbolizer
	Leaf       LeafFixer // nil: CFI-based recovery, unless NoLeafRecovery
	// NoLeafRecovery keeps the kernel's frame-pointer stacks as they are.
	NoLeafRecovery bool
	Kernel         KernelSymbols // nil leaves kernel frames as addresses
	// Resource returns the service name and resource attributes a process
	// published (process context); empty results fall back to
	// OTEL_SERVICE_NAME from the process environment.
	Resource func(pid uint32) (service string, attrs map[string]string)
	Logger   *slog.Logger
	// Mode symbolize.ModeNone leaves user frames as address, build ID and
	// file offset for a backend to symbolize; kernel frames keep their
	// names, since no backend can resolve this boot's kernel addresses.
	Mode symbolize.Mode
	// PerfMaps names JIT code in anonymous memory; nil leaves it as
	// addresses.
	PerfMaps *perfmap.Cache
	// VDSO names [vdso] frames; nil takes the agent's own
	// (symbolize.SelfVDSO), unless NoVDSO.
	VDSO   *symbolize.VDSO
	NoVDSO bool
	// StackWindow sets how many bytes of a process's stack the kernel
	// copies with each sample (sampler.Sampler.SetStackWindow; 0 forgets
	// the process's window): the collector sizes each process's window
	// from what the walks of its samples needed over WindowProbe, widens
	// the window of a process whose stacks it cut, and forgets it at exec
	// and exit. Nil keeps every window at the sampler's default.
	StackWindow func(pid, bytes uint32) error
	// WindowProbe is how long a process's samples are watched before its
	// window is sized (the sampler copies a process with no size with
	// sampler.Options.NewProcessWindow); 0 means DefaultWindowProbe.
	WindowProbe time.Duration
	// ExeWindow sets the window the kernel copies for the processes of an
	// executable (the kernel's dev_t and inode) that have none of their
	// own (sampler.Sampler.SetExeWindow): the collector gives each file,
	// for samples in its own code and for the others, the most any of its
	// processes needed there, doubled as a process's window is, so that
	// the next processes of the file (a compiler's, a health check's)
	// start with it instead of sampler.Options.NewProcessWindow. Nil keeps every new process at
	// the sampler's default.
	ExeWindow func(dev uint32, ino uint64, inExe, other uint32) error
	// ContextKeys returns the process context's
	// threadlocal.attribute_key_map of a process, which names the keys of
	// its thread-context attributes; nil leaves every attribute unnamed
	// (counted in Stats.CtxAttrsUnnamed, not exported).
	ContextKeys func(pid uint32) []string
	// MaxAttrSets bounds the distinct attribute sets kept per interval
	// (0: DefaultMaxAttrSets). Each is a sample identity of its own, so
	// a writer putting a request id into its attributes would otherwise
	// grow the profile without bound; samples past it keep their ids but
	// lose their attributes, counted in Stats.CtxAttrsCut.
	MaxAttrSets int
	// ParseBytes bounds the binaries an Emit parses: once the objects it
	// parsed hold that many bytes (symbolize.Object.Size; the first parse
	// of an Emit always goes ahead), a stack that needs a binary not parsed
	// yet waits, with all its samples and their addresses, for a later
	// Emit, and is symbolized then, never named otherwise (Stats.Deferred).
	// A stack that waited MaxWaits Emits goes ahead regardless. This
	// spreads over reports the parse of every binary a new agent meets
	// at its first one. Zero bounds nothing; Build never defers.
	ParseBytes int64
}

// MaxWaits is how many Emits a stack waits at most for its binary's parse
// (Options.ParseBytes) before it is symbolized regardless.
const MaxWaits = 6

// DefaultWindowProbe watches a process's stacks for a second before its
// window is sized: long enough for a service's usual paths to show, short
// enough that a long-running process soon costs no more than the window
// it needs.
const DefaultWindowProbe = time.Second

// DefaultMaxAttrSets is Options.MaxAttrSets by default.
const DefaultMaxAttrSets = 4096

// maxReasons bounds the distinct wait reasons of records in an interval,
// which sample.reason numbers; the Go runtime has fewer than 64 (a uint8 in
// g.waitreason), and a reason beyond the bound reads as the stack's.
const maxReasons = 1<<16 - 1

// sample is a record kept until the profile is built. Its stack and
// thread name are ids into the collector's tables: between reports memory
// grows by this struct per record (64 bytes), and by the distinct stacks
// (addresses only, so symbolization happens once per distinct address).
type sample struct {
	t     unixNano
	value int64
	link  profile.Link
	stack uint32 // stackTable id; the stack holds the pid
	tid   uint32
	cpu   uint32
	comm  uint32 // names id
	kind  profile.Kind
	state byte
	// reason is 1 + the reasons id of the record's own wait reason; 0:
	// the kernel stack tells (WaitReason).
	reason uint16
	attrs  uint32 // attrSets id; 0 for none
}

// unixNano is a time as Unix nanoseconds: the sampler's times are made by
// time.Unix(0, ns), so this gives them back as they were, in a third of
// the space of a time.Time.
type unixNano int64

// noTime stands for the zero time.Time, which has no Unix nanoseconds.
const noTime unixNano = math.MinInt64

func toUnixNano(t time.Time) unixNano {
	if t.IsZero() {
		return noTime
	}
	return unixNano(t.UnixNano())
}

func (n unixNano) time() time.Time {
	if n == noTime {
		return time.Time{}
	}
	return time.Unix(0, int64(n))
}

// Stats counts what the collector saw.
type Stats struct {
	Samples uint64
	// LeafRecovered counts samples whose user stack differs from the
	// kernel's frame-pointer walk: frames without a frame pointer were
	// found by their CFA rules (UnwindCFIFrames of them in all).
	LeafRecovered   uint64
	UnwindCFIFrames uint64
	// UnwindWindowCut counts stacks cut because a frame lay beyond the
	// stack window the kernel copied (STACK_TOP_BYTES); UnwindNoInfo
	// those ending at an address with no unwind rule (code without
	// .eh_frame, .debug_frame or Go tables, off the kernel's chain);
	// UnwindBadRule those ending at a rule the walk cannot evaluate (a
	// DWARF expression). The frames before the cut are kept; none is
	// guessed after it.
	UnwindWindowCut, UnwindNoInfo, UnwindBadRule uint64
	// UnwindBelowWindow counts stacks deeper than the window whose
	// frames beyond it are the kernel's, ending at frameless code under
	// them (unwind.StopBelowWindow): their windows are not widened, since
	// one holding those frames would hold the whole stack.
	UnwindBelowWindow uint64
	// UnwindLinkFrames counts the frames of JIT code off the kernel's
	// chain left by the rule of their instructions (CPython's perf
	// trampolines under frameless interpreter code) or by their
	// frame-pointer link (unwind.Result.JITFrames); UnwindBadLink the
	// stacks ending at JIT code whose frame pointer failed the checks of
	// such a link (unwind.StopBadLink).
	UnwindLinkFrames, UnwindBadLink uint64
	// WindowsWidened counts the times a process's window was widened
	// (Options.StackWindow) after a stack was cut by it; WindowsSized the
	// processes whose window was sized after Options.WindowProbe;
	// WindowsUnset the sizes the kernel's map did not take (full), whose
	// processes keep the window they had.
	WindowsWidened, WindowsSized, WindowsUnset uint64
	UserStackEmpty                             uint64
	// StacksCut counts samples whose user stack ended at a return address
	// in no code mapping of a process whose mappings are all known: the
	// frame-pointer chain broke in code without frame pointers, and what
	// followed was not a stack.
	StacksCut uint64
	// PreExec counts samples taken inside an exec before the new image's
	// registers were set (sampler.Record.PreExec); PreExecAttributed
	// those of them symbolized against the image before the exec (the
	// process as read before it, else its parent), the rest against the
	// process's own.
	PreExec, PreExecAttributed uint64
	// CtxAttrsUnnamed counts thread-context attributes left out because
	// the process context's key map names no key for them;
	// CtxAttrsMalformed samples whose attributes did not parse;
	// CtxAttrsCut samples that lost their attributes to the bound on
	// distinct sets (Options.MaxAttrSets). Their ids are kept.
	CtxAttrsUnnamed, CtxAttrsMalformed, CtxAttrsCut uint64
	// ImagesMissing counts stacks whose process image was not there to
	// symbolize them against: a sample whose image the tracker could not
	// hold as it was added, or no longer had at the Build. Each kept
	// sample holds its image, so this should stay 0; their user frames
	// stay addresses, never another image's names.
	ImagesMissing uint64
	// ExitAwaited counts the samples of a process gone before its
	// libraries were read that waited for its exit and were unwound
	// against the mappings the kernel captured then (awaitexit.go);
	// ExitAwaitMissed those that waited in vain (no capture came before a
	// report, an exec or a fork of the pid, or the wait was full) or
	// could not wait, unwound against the mappings known.
	ExitAwaited, ExitAwaitMissed uint64
	// Deferred counts the samples an Emit left for a later one because
	// their stack needed a binary beyond its parse bound
	// (Options.ParseBytes), once per Emit they waited; Forced the
	// samples symbolized past the bound after MaxWaits.
	Deferred, Forced uint64
	// Waiting is the number of samples waiting now.
	Waiting int
}

// Collector accumulates records. Add and Build may be called from
// different goroutines.
type Collector struct {
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// samples are kept in chunks of chunkSamples: appending never copies
	// what was kept (a 42,000-record interval would otherwise leave some
	// 13 MB of outgrown arrays behind), and Build frees each chunk once
	// converted, so the kept samples and the profile's barely overlap.
	samples [][]sample
	n       int // samples kept
	stacks  stackTable
	comms   names
	reasons names
	// attrSets interns the samples' profile.Attrs; id 0 is none.
	attrSets names
	// attrsCutLogged: the bound on attrSets was logged this interval.
	attrsCutLogged bool
	// held are the images the interval's samples name, by generation,
	// each held once in the tracker (proc.Tracker.Hold) and released
	// after the Build that symbolizes them.
	held map[uint32]bool
	// waited is how many Emits a stack of the interval already waited
	// (Options.ParseBytes), by stack id; nil when none did.
	waited map[uint32]uint8
	start  time.Time
	stats  Stats
	// windows are the stack windows of processes still running.
	windows map[uint32]*window
	// exeWindows are the windows given to executables (Options.ExeWindow).
	exeWindows map[exeKey][2]uint32
	// waiting counts the interval's samples that waited for a parse.
	waiting int
	// awaiting are the samples waiting for their process's exit, by pid
	// (awaitexit.go), and awaitBytes their size.
	awaiting   map[uint32][]awaiting
	awaitBytes int
}

// exeKey names an executable as the kernel does: dev_t and inode.
type exeKey struct {
	dev uint32
	ino uint64
}

// maxExeWindows bounds Collector.exeWindows; past it the map starts
// again (the kernel's map keeps its most recently used entries anyway).
const maxExeWindows = 4096

// window is what the collector knows of one process's stack window.
type window struct {
	bytes  uint32    // asked of the kernel; 0 before the first ask
	sized  bool      // sized from the first WindowProbe of samples
	first  time.Time // the first sample's time
	needed uint64    // the most bytes a walk needed so far
	// neededBy is needed for each kind of ip (ipKind), seen the kinds
	// that had a sample.
	neededBy [2]uint64
	seen     [2]bool
	exe      exeKey // the process's executable; zero when unknown
}

// New returns a Collector.
func New(opts Options) *Collector {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tracker == nil {
		opts.Tracker = proc.NewTracker("/proc", opts.Logger)
	}
	if opts.Symbolizer == nil {
		opts.Symbolizer = symbolize.New(opts.Logger, symbolize.Options{})
	}
	if opts.VDSO == nil && !opts.NoVDSO {
		v, err := symbolize.SelfVDSO()
		if err != nil {
			opts.Logger.Warn("[vdso] frames stay unnamed", "error", err)
		}
		opts.VDSO = v
	}
	if opts.Leaf == nil && !opts.NoLeafRecovery {
		// The symbolizer and the unwind tables keep one copy of each Go
		// pclntab between them.
		opts.Leaf = &CFILeafFixer{Tables: unwind.NewCache(opts.Logger,
			unwind.CacheOptions{Pclntabs: opts.Symbolizer.Pclntabs()})}
	}
	if lf, ok := opts.Leaf.(*CFILeafFixer); ok && lf.VDSO == nil {
		// The [vdso] frames' rules from the image that names them. On
		// arm64 its leaves keep no frame record. x86-64's functions keep
		// frame pointers, but a sample at a function's first instruction
		// or after its epilogue's pop of rbp has the caller's rbp, and
		// the kernel's chain then skips the caller and every frameless
		// function above it (libc's clock_gettime, libstdc++'s
		// steady_clock::now: 1.3 % of a clock_gettime loop's samples).
		lf.VDSO = opts.VDSO
	}
	return &Collector{opts: opts, log: opts.Logger, start: time.Now()}
}

// ProcEvent keeps the process table in step with exec, exit and fork, applied
// in stream order: the samples before the event were added against the
// table as it was, those after it are added against the table it leaves.
func (c *Collector) ProcEvent(e sampler.ProcEvent) {
	if e.Exit {
		if e.Maps != nil {
			// Libraries and vDSO of a process whose maps were read too
			// early or never: captured by the kernel as it exited.
			c.opts.Tracker.ExitMaps(e.PID, e.Time, e.Exe, mappings(e.Maps))
		}
		// Its samples that waited for these mappings, before the
		// window is dropped: their walks size it, and what they needed
		// goes to the executable's.
		c.flushAwaiting(e.PID, e.Maps != nil)
		c.dropWindow(e.PID)
		c.opts.Tracker.Exit(e.PID, e.Time)
		return
	}
	// The pid's image changes: samples waiting for its exit take the
	// image they were taken in.
	c.flushAwaiting(e.PID, false)
	if e.Fork {
		c.opts.Tracker.Fork(e.PID, e.Parent, e.Time)
		c.dropWindow(e.PID)
		return
	}
	// The reader read the new image as it decoded the exec (e.Read); an
	// event without a read has it read now.
	if r, ok := e.Read.(*proc.ExecRead); ok {
		c.opts.Tracker.ApplyExec(e.PID, e.Time, r)
	} else {
		c.opts.Tracker.Exec(e.PID, e.Time, (*proc.Image)(e.Image))
	}
	c.dropWindow(e.PID)
}

// kindOf is the profile's kind of a sample.
func kindOf(k sampler.Kind) profile.Kind {
	if k == sampler.OffCPU {
		return profile.OffCPU
	}
	return profile.OnCPU
}

// mappings converts the kernel's exit capture to the tracker's mappings
// (the same fields).
func mappings(vmas []sampler.VMA) []proc.Mapping {
	ms := make([]proc.Mapping, len(vmas))
	for i, v := range vmas {
		ms[i] = proc.Mapping(v)
	}
	return ms
}

// Add records one sample, against the tracker's state at its place in
// the stream: the image its process runs (read at first sight, so that
// its mappings survive its exit), held until the Build that symbolizes
// the sample.
//
// A sample taken inside an exec before the new image's registers were set
// (r.PreExec) has the user registers and stack of the image before the
// exec: its stack is symbolized against that image (the process's entry,
// which the exec that follows the sample in the stream replaces, else its
// parent's), while the sample keeps its pid, thread, name and time.
//
// A sample of a process gone before its libraries were read waits for
// the process's exit, whose capture of its mappings it is unwound against
// (awaitexit.go).
func (c *Collector) Add(r *sampler.Record) {
	var p *proc.Process
	if r.PreExec {
		p = c.opts.Tracker.Before(r.PID, r.ParentPID, r.Time, r.UserIP)
	}
	attributed := p != nil
	if p == nil {
		p = c.opts.Tracker.Current(r.PID)
		if p.ExecRead() && needsLibraries(p, r.UserStack) {
			// Read at its exec, before the loader mapped the
			// libraries this stack runs in: read again now, while it
			// lives; on kernels without the VMA iterator nothing
			// captures them at its exit.
			before := len(p.Mappings)
			p = c.opts.Tracker.RereadAfterExec(p)
			c.log.Debug("process read again after its exec", "pid", r.PID, "mappings", before, "now", len(p.Mappings))
		}
		if c.await(p, r) {
			return
		}
	}
	c.addTo(p, r, attributed)
}

// addTo unwinds r's user stack against p, its image, and keeps it.
func (c *Collector) addTo(p *proc.Process, r *sampler.Record, attributed bool) {
	user, res, recovered := c.fixLeaf(p, r)
	attrs, unnamed, bad := c.attrs(r)
	c.keep(r, user, res, recovered, p, attributed, attrs, unnamed, bad)
}

// needsLibraries reports whether a user stack (the ip, then return
// addresses, looked up a byte earlier) has an address in none of p's
// mappings and one in its executable: the program runs, so the loader has
// mapped the libraries it needs, and a read now finds them. A stack of the
// loader itself, still mapping them, waits.
func needsLibraries(p *proc.Process, user []uint64) bool {
	miss, inExe := false, false
	for i, a := range user {
		if i > 0 {
			a--
		}
		m := p.Find(a)
		switch {
		case m == nil:
			miss = true
		case m.Path == p.Exe:
			inExe = true
		}
	}
	return miss && inExe
}

// fixLeaf returns r's user stack unwound through code without frame
// pointers (StackUnwinder), or, with a plain LeafFixer, with the caller of
// a frameless leaf put back, when p's code shows where its return address
// lies. res is the walk's result when one ran.
func (c *Collector) fixLeaf(p *proc.Process, r *sampler.Record) (user []uint64, res *unwind.Result, recovered bool) {
	user = r.UserStack
	if c.opts.Leaf == nil || len(user) == 0 || r.UserSP == 0 || len(r.StackTop) == 0 && !linkRegister {
		return user, nil, false
	}
	if u, ok := c.opts.Leaf.(StackUnwinder); ok && len(r.StackTop) > 0 && (!linkRegister || arm64Hybrid) {
		frames, wr := u.Unwind(p, r, nil)
		c.sizeWindow(p, r.PID, r.Time, wr, r.UserIP)
		return frames, &wr, wr.CFIFrames > 0 && !slices.Equal(frames, user)
	}
	m := p.Find(r.UserIP)
	if m == nil || m.Anonymous() {
		return user, nil, false
	}
	var ra uint64
	var ok bool
	if linkRegister {
		lf, isLR := c.opts.Leaf.(LRLeafFixer)
		if !isLR {
			return user, nil, false
		}
		ra, ok = lf.RecoverCallerLR(p, m, r.UserIP, r.UserLR)
	} else {
		ra, ok = c.opts.Leaf.RecoverCaller(p, m, r.UserIP, r.UserSP, r.StackTop)
	}
	if !ok || len(user) >= 2 && user[1] == ra {
		return user, nil, false
	}
	fixed := make([]uint64, 0, len(user)+1)
	fixed = append(fixed, user[0], ra)
	return append(fixed, user[1:]...), nil, true
}

// sizeWindow keeps pid's stack window fitted to its stacks: once its
// samples span WindowProbe, it asks the kernel for a window that holds
// twice the most any of them needed (in powers of two from 1 KiB to
// sampler.WindowMax), and at once for a stack the window cut. The stacks
// cut so far stay cut (counted); the next ones have the bytes. ip is the
// sample's: what its walk needed is learned for its kind of ip (ipKind).
func (c *Collector) sizeWindow(p *proc.Process, pid uint32, t time.Time, wr unwind.Result, ip uint64) {
	if c.opts.StackWindow == nil {
		return
	}
	probe := c.opts.WindowProbe
	if probe <= 0 {
		probe = DefaultWindowProbe
	}
	kind := ipKind(p, ip)
	c.mu.Lock()
	w := c.windows[pid]
	if w == nil {
		if c.windows == nil {
			c.windows = map[uint32]*window{}
		}
		w = &window{first: t, exe: exeOf(p)}
		c.windows[pid] = w
	}
	w.needed = max(w.needed, wr.Needed)
	w.neededBy[kind] = max(w.neededBy[kind], wr.Needed)
	w.seen[kind] = true
	var want uint32
	var learn [2]uint32
	switch {
	case wr.Stop == unwind.StopWindow:
		// Twice what this stack needed: deeper stacks of the same code
		// need more, and every sample until the kernel has the new size
		// is cut.
		if want = windowFor(wr.Needed); want > w.bytes {
			c.stats.WindowsWidened++
		}
		learn[kind] = windowFor(w.neededBy[kind])
	case !w.sized && t.Sub(w.first) >= probe:
		want = windowFor(w.needed)
		w.sized = true
		c.stats.WindowsSized++
		learn = w.byKind()
	}
	exe := w.exe
	if want <= w.bytes {
		c.mu.Unlock()
		c.learnExeWindow(exe, learn)
		return
	}
	w.bytes = max(w.bytes, want)
	want = w.bytes
	c.mu.Unlock()
	if err := c.opts.StackWindow(pid, want); err != nil {
		c.stats.WindowsUnset++
		c.log.Warn("set the stack window; its stacks keep the window they had", "pid", pid, "bytes", want, "error", err)
	}
	c.learnExeWindow(exe, learn)
}

// Kinds of a sample's ip, for an executable's window (the kernel's struct
// exe_window): in the executable's own code, or elsewhere (its loader as
// the process starts, its libraries). A short-lived process's loader
// phase needs the widest window, its own code often the first chunk only.
const (
	inExe = iota
	elsewhere
)

// ipKind is the kind of ip in p: inExe when the mapping it is in is the
// executable's, as the kernel's mm->start_code to end_code.
func ipKind(p *proc.Process, ip uint64) int {
	if p != nil && p.Exe != "" {
		if m := p.Find(ip); m != nil && m.Path == p.Exe {
			return inExe
		}
	}
	return elsewhere
}

// byKind is the window each kind of ip of w's samples needs; 0 for a kind
// none of them had.
func (w *window) byKind() (by [2]uint32) {
	for k := range by {
		if w.seen[k] {
			by[k] = windowFor(w.neededBy[k])
		}
	}
	return by
}

// learnExeWindow gives exe, for each kind of ip, a window of at least by's
// bytes (Options.ExeWindow); 0 teaches nothing.
func (c *Collector) learnExeWindow(exe exeKey, by [2]uint32) {
	if c.opts.ExeWindow == nil || exe.ino == 0 || by == [2]uint32{} {
		return
	}
	c.mu.Lock()
	cur := c.exeWindows[exe]
	next := [2]uint32{max(cur[0], by[0]), max(cur[1], by[1])}
	if next == cur {
		c.mu.Unlock()
		return
	}
	if c.exeWindows == nil || len(c.exeWindows) >= maxExeWindows {
		c.exeWindows = map[exeKey][2]uint32{}
	}
	c.exeWindows[exe] = next
	c.mu.Unlock()
	if err := c.opts.ExeWindow(exe.dev, exe.ino, next[inExe], next[elsewhere]); err != nil {
		c.stats.WindowsUnset++
		c.log.Warn("set the stack window of an executable; its new processes keep the default", "ino", exe.ino, "bytes", next, "error", err)
	}
}

// exeOf returns the key of p's executable, from its mapping (whose dev
// and inode, for an image placed from an exec event, are the kernel's);
// zero when p has none.
func exeOf(p *proc.Process) exeKey {
	if p == nil || p.Exe == "" {
		return exeKey{}
	}
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if m.Path != p.Exe || m.Inode == 0 {
			continue
		}
		maj, min, ok := strings.Cut(m.Dev, ":")
		if !ok {
			return exeKey{}
		}
		a, err1 := strconv.ParseUint(maj, 16, 32)
		b, err2 := strconv.ParseUint(min, 16, 32)
		if err1 != nil || err2 != nil || a >= 1<<12 || b >= 1<<20 {
			return exeKey{}
		}
		return exeKey{dev: uint32(a<<20 | b), ino: m.Inode}
	}
	return exeKey{}
}

// windowFor returns the window that holds twice needed bytes: a power of
// two from 1 KiB up to sampler.WindowMax.
func windowFor(needed uint64) uint32 {
	want := uint32(unwind.FirstWindow)
	for uint64(want) < 2*needed && want < sampler.WindowMax {
		want *= 2
	}
	return want
}

// dropWindow forgets the window of a process that exited or exec'd: the
// pid's next image is sized from its own stacks.
func (c *Collector) dropWindow(pid uint32) {
	c.mu.Lock()
	w, ok := c.windows[pid]
	delete(c.windows, pid)
	c.mu.Unlock()
	if ok && !w.sized && w.bytes == 0 {
		// Gone (or another image) before its window was sized: what
		// its stacks needed is all the file's next processes have to
		// go by.
		c.learnExeWindow(w.exe, w.byKind())
	}
	if ok && w.bytes != 0 && c.opts.StackWindow != nil {
		if err := c.opts.StackWindow(pid, 0); err != nil {
			c.log.Warn("drop the stack window", "pid", pid, "error", err)
		}
	}
}

// keep stores the sample of r with the given user stack, against img, the
// image it was resolved to, which the interval holds from its first sample
// on; attributed: a sample taken inside an exec placed in the image before.
func (c *Collector) keep(r *sampler.Record, user []uint64, res *unwind.Result, recovered bool, img *proc.Process, attributed bool,
	attrs profile.Attrs, unnamed int, badAttrs bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Samples++
	c.stats.CtxAttrsUnnamed += uint64(unnamed)
	if badAttrs {
		c.stats.CtxAttrsMalformed++
	}
	attrID := c.internAttrs(r.PID, attrs)
	if recovered {
		c.stats.LeafRecovered++
	}
	if res != nil {
		c.stats.UnwindCFIFrames += uint64(res.CFIFrames)
		c.stats.UnwindLinkFrames += uint64(res.JITFrames)
		switch res.Stop {
		case unwind.StopWindow:
			c.stats.UnwindWindowCut++
		case unwind.StopBelowWindow:
			c.stats.UnwindBelowWindow++
		case unwind.StopNoInfo:
			c.stats.UnwindNoInfo++
		case unwind.StopBadRule:
			c.stats.UnwindBadRule++
		case unwind.StopBadLink:
			c.stats.UnwindBadLink++
		}
	}
	if len(user) == 0 {
		c.stats.UserStackEmpty++
	}
	if r.PreExec {
		c.stats.PreExec++
	}
	if attributed {
		c.stats.PreExecAttributed++
	}
	image := c.hold(img)
	var reason uint16
	if r.Reason != "" && len(c.reasons.list) < maxReasons {
		reason = uint16(c.reasons.intern(r.Reason) + 1)
	}
	c.addSample(sample{
		t: toUnixNano(r.Time), value: r.Value, link: profile.Link(r.Link),
		stack: c.stacks.intern(r.PID, image, r.KernStack, user),
		tid:   r.TID, cpu: r.CPU, comm: c.comms.intern(r.Comm),
		kind: kindOf(r.Kind), state: r.State, reason: reason, attrs: attrID,
	})
}

// hold holds img in the tracker once for the interval (released after
// the Build that symbolizes it) and returns its generation; 0 for an
// image that is not the tracker's, which the Build then finds missing
// (counted there) rather than naming it from another one. Call with
// c.mu held.
func (c *Collector) hold(img *proc.Process) uint32 {
	image := img.Gen()
	if c.held[image] {
		return image
	}
	if !c.opts.Tracker.Hold(img) {
		return 0
	}
	if c.held == nil {
		c.held = map[uint32]bool{}
	}
	c.held[image] = true
	return image
}

// addSample adds a sample to the interval's chunks. Call with c.mu held.
func (c *Collector) addSample(s sample) {
	if k := len(c.samples); k == 0 || len(c.samples[k-1]) == chunkSamples {
		c.samples = append(c.samples, make([]sample, 0, chunkSamples))
	}
	c.samples[len(c.samples)-1] = append(c.samples[len(c.samples)-1], s)
	c.n++
}

// Trim lets the leaf fixer drop what went idle (CFILeafFixer.Trim); call
// it after a report, as Symbolizer.Trim.
func (c *Collector) Trim() {
	if t, ok := c.opts.Leaf.(interface{ Trim() }); ok {
		t.Trim()
	}
}

// Stats returns the counts so far.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	st.Waiting = c.waiting
	return st
}

// Prepare opens the object of every mapping the samples added so far
// touch, without symbolizing: objects waiting for a separate debug file
// request it now (symbolize.DebugFetcher), so that a caller can give the
// fetches time to finish before Build.
func (c *Collector) Prepare() {
	if c.opts.Mode == symbolize.ModeNone {
		return
	}
	c.flushAllAwaiting()
	c.mu.Lock()
	type key struct {
		gen   uint32
		start uint64
	}
	seen := map[key]bool{}
	var todo []key
	var buf []uint64
	for id := range c.stacks.len() {
		_, image, _, user := c.stacks.stack(uint32(id), &buf)
		p, _ := c.opts.Tracker.Image(image)
		if p == nil {
			continue // counted by the Build
		}
		for _, a := range user {
			m := p.Find(a)
			if m == nil || m.Anonymous() || m.Path[0] == '[' {
				continue
			}
			if k := (key{image, m.Start}); !seen[k] {
				seen[k] = true
				todo = append(todo, k)
			}
		}
	}
	c.mu.Unlock()
	// The images stay held until the Build this precedes, which the same
	// caller makes.
	for _, k := range todo {
		if p, _ := c.opts.Tracker.Image(k.gen); p != nil {
			if m := p.Find(k.start); m != nil {
				c.opts.Symbolizer.Open(p.OpenPath(m), m.Path)
			}
		}
	}
}

// Build symbolizes everything added since the last Build and returns it as
// a profile; the collector starts afresh. Each distinct stack is
// symbolized once, and its samples share the frames: Sample.Frames is
// read-only.
func (c *Collector) Build(end time.Time) *profile.Profile {
	c.flushAllAwaiting()
	k := c.take(end)
	samples := make([]profile.Sample, 0, k.n)
	var st Stats
	prof := k.emit(c.opts, 0, &st, func(s *profile.Sample) { samples = append(samples, *s) }, nil)
	k.release(c.opts.Tracker)
	c.addStats(st)
	prof.Samples = samples
	return prof
}

// Emit is Build for a caller that consumes each sample as it is made (a
// profile.Aggregator), so that the interval's samples never exist in
// profile form all at once: add gets every sample, in the order Build
// gives, and must not keep the pointer. The profile returned has none.
//
// Stacks that need a binary beyond the parse bound (Options.ParseBytes)
// are not in it: their samples are kept, as they were added, for the
// next Emit or Build, whose profile starts at the earliest of them.
func (c *Collector) Emit(end time.Time, add func(*profile.Sample)) *profile.Profile {
	return c.emit(end, add, c.opts.ParseBytes)
}

// EmitAll is Emit without the parse bound: everything kept, waiting
// samples included, is in the profile (an agent's last report).
func (c *Collector) EmitAll(end time.Time, add func(*profile.Sample)) *profile.Profile {
	return c.emit(end, add, 0)
}

func (c *Collector) emit(end time.Time, add func(*profile.Sample), bound int64) *profile.Profile {
	var st Stats
	c.flushAllAwaiting()
	k := c.take(end)
	prof := k.emit(c.opts, bound, &st, add, c.requeue)
	k.release(c.opts.Tracker)
	c.addStats(st)
	return prof
}

// requeue keeps again, for the next interval, the samples of a stack of
// k that waited for its binary's parse: the stack, thread name, reason
// and attributes interned anew and the image held for the interval.
func (c *Collector) requeue(k *kept, id uint32, samples []sample) {
	var buf []uint64
	pid, image, kern, user := k.stacks.stack(id, &buf)
	c.mu.Lock()
	defer c.mu.Unlock()
	if image != 0 && !c.held[image] {
		p, _ := c.opts.Tracker.Image(image)
		image = 0 // counted as missing by the Build that meets it
		if p != nil {
			image = c.hold(p)
		}
	}
	nid := c.stacks.intern(pid, image, kern, user)
	if c.waited == nil {
		c.waited = map[uint32]uint8{}
	}
	c.waited[nid] = max(c.waited[nid], k.waited[id]+1)
	for _, r := range samples {
		r.stack = nid
		r.comm = c.comms.intern(k.comms.list[r.comm])
		if r.reason != 0 {
			r.reason = uint16(c.reasons.intern(k.reasons.list[r.reason-1]) + 1)
		}
		if r.attrs != 0 {
			r.attrs = c.internAttrs(pid, profile.Attrs(k.attrSets.list[r.attrs]))
		}
		if t := r.t.time(); !t.IsZero() && t.Before(c.start) {
			c.start = t
		}
		c.addSample(r)
		c.waiting++
	}
}

// addStats adds what a Build counted.
func (c *Collector) addStats(st Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.StacksCut += st.StacksCut
	c.stats.ImagesMissing += st.ImagesMissing
	c.stats.Deferred += st.Deferred
	c.stats.Forced += st.Forced
}

// kept is what the collector kept over one interval.
type kept struct {
	start, end time.Time
	chunks     [][]sample
	n          int
	stacks     stackTable
	comms      names
	reasons    names
	attrSets   names
	held       map[uint32]bool
	waited     map[uint32]uint8
}

// take hands over what was kept and starts afresh.
func (c *Collector) take(end time.Time) *kept {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &kept{start: c.start, end: end, chunks: c.samples, n: c.n, stacks: c.stacks, comms: c.comms,
		reasons: c.reasons, attrSets: c.attrSets, held: c.held, waited: c.waited}
	c.samples, c.n, c.stacks, c.comms, c.reasons, c.attrSets = nil, 0, stackTable{}, names{}, names{}, names{}
	c.attrsCutLogged = false
	c.held, c.waited, c.waiting = nil, nil, 0
	c.start = end
	return k
}

// release lets go of the images held over the interval, once symbolized.
func (k *kept) release(t *proc.Tracker) {
	for gen := range k.held {
		t.Release(gen)
	}
	k.held = nil
}

// chunkSamples is the size of the chunks samples are kept in (64 KiB).
const chunkSamples = 1024
