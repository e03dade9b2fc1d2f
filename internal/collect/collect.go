// Package collect turns decoded kernel records into a symbolized
// profile.Profile: it reads process mappings at first sight, recovers the
// caller of frameless leaf functions, and symbolizes user and kernel
// frames when the profile is built.
package collect

import (
	"log/slog"
	"math"
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
}

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
	Samples        uint64
	LeafRecovered  uint64
	UserStackEmpty uint64
	// StacksCut counts samples whose user stack ended at a return address
	// in no code mapping of a process whose mappings are all known: the
	// frame-pointer chain broke in code without frame pointers, and what
	// followed was not a stack.
	StacksCut uint64
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
	start   time.Time
	stats   Stats
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
		opts.Leaf = &CFILeafFixer{Tables: unwind.NewCache(opts.Logger, 0)}
	}
	return &Collector{opts: opts, log: opts.Logger, start: time.Now()}
}

// ProcEvent keeps the process table in step with exec and exit.
func (c *Collector) ProcEvent(e sampler.ProcEvent) {
	if e.Exit {
		if e.Maps != nil {
			// Libraries and vDSO of a process whose maps were read too
			// early or never: captured by the kernel as it exited.
			c.opts.Tracker.ExitMaps(e.PID, e.Time, e.Exe, e.Maps)
		}
		c.opts.Tracker.Exit(e.PID)
		return
	}
	// Read the new image's mappings now, while the process may still live
	// (a no-op when the sampler's OnExec already did).
	c.opts.Tracker.Exec(e.PID, e.Time, e.Image)
}

// Add records one sample. The process is read at first sight so that its
// mappings survive its exit.
func (c *Collector) Add(r *sampler.Record) {
	p := c.opts.Tracker.Get(r.PID)
	user := r.UserStack
	recovered := false
	if c.opts.Leaf != nil && len(user) > 0 && r.UserSP != 0 && len(r.StackTop) > 0 {
		if m := p.Find(r.UserIP); m != nil && !m.Anonymous() {
			if ra, ok := c.opts.Leaf.RecoverCaller(p, m, r.UserIP, r.UserSP, r.StackTop); ok && (len(user) < 2 || user[1] != ra) {
				fixed := make([]uint64, 0, len(user)+1)
				fixed = append(fixed, user[0], ra)
				user = append(fixed, user[1:]...)
				recovered = true
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Samples++
	if recovered {
		c.stats.LeafRecovered++
	}
	if len(user) == 0 {
		c.stats.UserStackEmpty++
	}
	if k := len(c.samples); k == 0 || len(c.samples[k-1]) == chunkSamples {
		c.samples = append(c.samples, make([]sample, 0, chunkSamples))
	}
	last := &c.samples[len(c.samples)-1]
	c.n++
	*last = append(*last, sample{
		t: toUnixNano(r.Time), value: r.Value, link: r.Link,
		stack: c.stacks.intern(r.PID, r.KernStack, user),
		tid:   r.TID, cpu: r.CPU, comm: c.comms.intern(r.Comm),
		kind: r.Kind, state: r.State,
	})
}

// Stats returns the counts so far.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Prepare opens the object of every mapping the samples added so far
// touch, without symbolizing: objects waiting for a separate debug file
// request it now (symbolize.DebugFetcher), so that a caller can give the
// fetches time to finish before Build.
func (c *Collector) Prepare() {
	if c.opts.Mode == symbolize.ModeNone {
		return
	}
	c.mu.Lock()
	type key struct {
		pid   uint32
		start uint64
	}
	seen := map[key]bool{}
	var todo []key
	var buf []uint64
	for id := range c.stacks.len() {
		pid, _, user := c.stacks.stack(uint32(id), &buf)
		p := c.opts.Tracker.Get(pid)
		for _, a := range user {
			m := p.Find(a)
			if m == nil || m.Anonymous() || m.Path[0] == '[' {
				continue
			}
			if k := (key{pid, m.Start}); !seen[k] {
				seen[k] = true
				todo = append(todo, k)
			}
		}
	}
	c.mu.Unlock()
	for _, k := range todo {
		p := c.opts.Tracker.Get(k.pid)
		if m := p.Find(k.start); m != nil {
			c.opts.Symbolizer.Open(p.OpenPath(m), m.Path)
		}
	}
}

// Build symbolizes everything added since the last Build and returns it as
// a profile; the collector starts afresh. Each distinct stack is
// symbolized once, and its samples share the frames: Sample.Frames is
// read-only.
func (c *Collector) Build(end time.Time) *profile.Profile {
	k := c.take(end)
	samples := make([]profile.Sample, 0, k.n)
	var st Stats
	prof := k.emit(c.opts, &st, func(s *profile.Sample) { samples = append(samples, *s) })
	c.addStats(st)
	prof.Samples = samples
	return prof
}

// Emit is Build for a caller that consumes each sample as it is made (a
// profile.Aggregator), so that the interval's samples never exist in
// profile form all at once: add gets every sample, in the order Build
// gives, and must not keep the pointer. The profile returned has none.
func (c *Collector) Emit(end time.Time, add func(*profile.Sample)) *profile.Profile {
	var st Stats
	prof := c.take(end).emit(c.opts, &st, add)
	c.addStats(st)
	return prof
}

// addStats adds what a Build counted.
func (c *Collector) addStats(st Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.StacksCut += st.StacksCut
}

// kept is what the collector kept over one interval.
type kept struct {
	start, end time.Time
	chunks     [][]sample
	n          int
	stacks     stackTable
	comms      names
}

// take hands over what was kept and starts afresh.
func (c *Collector) take(end time.Time) *kept {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &kept{start: c.start, end: end, chunks: c.samples, n: c.n, stacks: c.stacks, comms: c.comms}
	c.samples, c.n, c.stacks, c.comms = nil, 0, stackTable{}, names{}
	c.start = end
	return k
}

// chunkSamples is the size of the chunks samples are kept in (64 KiB).
const chunkSamples = 1024
