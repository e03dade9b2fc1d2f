// Package collect turns decoded kernel records into a symbolized
// profile.Profile: it reads process mappings at first sight, recovers the
// caller of frameless leaf functions, and symbolizes user and kernel
// frames when the profile is built.
package collect

import (
	"log/slog"
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

// raw is a sample kept until the profile is built; only addresses, so
// symbolization happens once per distinct address.
type raw struct {
	kind       profile.Kind
	pid, tid   uint32
	cpu        uint32
	comm       string
	t          time.Time
	value      int64
	state      byte
	link       profile.Link
	user, kern []uint64
}

// Stats counts what the collector saw.
type Stats struct {
	Samples        uint64
	LeafRecovered  uint64
	UserStackEmpty uint64
}

// Collector accumulates records. Add and Build may be called from
// different goroutines.
type Collector struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	samples []raw
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
	c.samples = append(c.samples, raw{
		kind: r.Kind, pid: r.PID, tid: r.TID, cpu: r.CPU, comm: r.Comm,
		t: r.Time, value: r.Value, state: r.State, link: r.Link,
		user: user, kern: r.KernStack,
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
	for i := range c.samples {
		r := &c.samples[i]
		p := c.opts.Tracker.Get(r.pid)
		for _, a := range r.user {
			m := p.Find(a)
			if m == nil || m.Anonymous() || m.Path[0] == '[' {
				continue
			}
			if k := (key{r.pid, m.Start}); !seen[k] {
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
// a profile; the collector starts afresh.
func (c *Collector) Build(end time.Time) *profile.Profile {
	c.mu.Lock()
	samples := c.samples
	start := c.start
	c.samples = nil
	c.start = end
	c.mu.Unlock()

	b := newBuilder(c.opts)
	prof := &profile.Profile{
		Start:     start,
		End:       end,
		Frequency: c.opts.Frequency,
		Processes: map[uint32]*profile.Process{},
		Samples:   make([]profile.Sample, 0, len(samples)),
	}
	for i := range samples {
		r := &samples[i]
		if _, ok := prof.Processes[r.pid]; !ok {
			prof.Processes[r.pid] = b.process(r.pid)
		}
		s := profile.Sample{
			Kind: r.kind, PID: r.pid, TID: r.tid, CPU: r.cpu, ThreadName: r.comm,
			Time: r.t, Value: r.value, Link: r.link,
		}
		if r.state != 0 {
			s.State = string(rune(r.state))
		}
		s.Frames = b.frames(r.pid, r.kern, r.user)
		if r.kind == profile.OffCPU {
			s.Frames = trimTracing(s.Frames)
			s.Reason = WaitReason(s.Frames)
		}
		prof.Samples = append(prof.Samples, s)
	}
	return prof
}
