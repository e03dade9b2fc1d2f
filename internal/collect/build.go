package collect

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// builder symbolizes one batch, caching by process and address so each
// distinct address is resolved once.
type builder struct {
	opts     Options
	mappings map[mapKey]*profile.Mapping
	cache    map[addrKey][]profile.Frame
	// objects holds, per mapping, the object Symbolizer.Open returned for
	// it in this batch: each is opened once, not once per address (two
	// stats of a /proc path each, 5 % of the agent's first minute on a
	// node of big binaries).
	objects map[mapKey]opened
	kernel  *profile.Mapping
	// refreshed: processes re-read in this batch for an address in none
	// of their mappings.
	refreshed map[uint32]bool
	// missingLogged: a stack without its image was logged this batch.
	missingLogged bool
	// bound is the parse bound of this batch (Options.ParseBytes; 0:
	// none), parsed the bytes of the objects it parsed so far, and
	// anyParsed set once it parsed one. force lets the stack being
	// symbolized parse past the bound; wait is set when one of its
	// frames needs a binary left for a later batch.
	bound, parsed int64
	anyParsed     bool
	force, wait   bool
}

// refreshAge is how long a live process's mappings are trusted before an
// address outside them makes the tracker read them again.
const refreshAge = 10 * time.Second

// mapKey and addrKey name a mapping and an address of one process image
// by its generation (proc.Process.Gen): the same pid's addresses mean
// other code in another image (after an exec, or a sample taken inside
// one, symbolized against the image before).
// Gen 0 names no image: the key of a pid's unknown mapping, of a kernel
// address (pid 0) and of a stack whose image is missing.
type mapKey struct {
	gen, pid uint32
	start    uint64
}

type addrKey struct {
	gen, pid uint32
	addr     uint64
}

// opened is what Symbolizer.Open returned for a mapping.
type opened struct {
	obj *symbolize.Object
	err error
}

func newBuilder(opts Options, bound int64) *builder {
	return &builder{
		opts:     opts,
		bound:    bound,
		mappings: map[mapKey]*profile.Mapping{},
		cache:    map[addrKey][]profile.Frame{},
		objects:  map[mapKey]opened{},
		kernel:   &profile.Mapping{Path: "[kernel.kallsyms]", Kernel: true},

		refreshed: map[uint32]bool{},
	}
}

// emit symbolizes each distinct stack once, then hands every sample to
// add, freeing each chunk once it is done. With a parse bound (Options.ParseBytes), a
// stack that needs a binary beyond it is not symbolized: its samples go
// to requeue, together, instead of add.
func (k *kept) emit(opts Options, bound int64, stats *Stats, add func(*profile.Sample),
	requeue func(k *kept, id uint32, samples []sample)) *profile.Profile {
	prof := &profile.Profile{
		Start:     k.start,
		End:       k.end,
		Frequency: opts.Frequency,
		Processes: map[uint32]*profile.Process{},
	}
	// Symbolize first, while only the kept samples are live: reading
	// debug info for the first time is a burst of garbage.
	if requeue == nil {
		bound = 0
	}
	b := newBuilder(opts, bound)
	built := make([]builtStack, k.stacks.len())
	var buf []uint64
	waits := 0
	for id := range built {
		pid, image, kern, user := k.stacks.stack(uint32(id), &buf)
		b.force, b.wait = k.waited[uint32(id)] >= MaxWaits, false
		img, current := b.image(pid, image, stats)
		frames, cut := b.frames(pid, img, current, kern, user)
		if b.wait {
			built[id] = builtStack{pid: pid, wait: true}
			waits++
			continue
		}
		if _, ok := prof.Processes[pid]; !ok {
			prof.Processes[pid] = b.process(pid)
		}
		trimmed := trimTracing(frames)
		built[id] = builtStack{pid: pid, frames: frames, trimmed: trimmed, reason: WaitReason(trimmed), cut: cut, forced: b.force && bound > 0}
	}
	// The samples of each waiting stack, together, in the order added.
	var later map[uint32][]sample
	if waits > 0 {
		later = make(map[uint32][]sample, waits)
	}
	var s profile.Sample
	for ci, chunk := range k.chunks {
		for i := range chunk {
			st := &built[chunk[i].stack]
			if st.wait {
				later[chunk[i].stack] = append(later[chunk[i].stack], chunk[i])
				stats.Deferred++
				continue
			}
			if st.forced {
				stats.Forced++
			}
			if st.cut {
				stats.StacksCut++
			}
			s = convert(&chunk[i], st, k)
			add(&s)
		}
		k.chunks[ci] = nil
	}
	if waits > 0 {
		for _, id := range slices.Sorted(maps.Keys(later)) {
			requeue(k, id, later[id])
		}
		opts.Logger.Debug("stacks wait for a binary's parse (parse bound of the report)",
			"stacks", waits, "samples", stats.Deferred, "parsed_bytes", b.parsed, "bound", bound)
	}
	return prof
}

// builtStack is a stack symbolized for one Build, shared by its samples.
type builtStack struct {
	pid    uint32
	frames []profile.Frame
	// trimmed and reason are what an off-CPU sample of the stack shows:
	// without the tracing frames, and why it waited.
	trimmed []profile.Frame
	reason  string
	// cut: the user stack ended at a return address in no code mapping.
	cut bool
	// wait: the stack needs a binary beyond the parse bound and waits
	// for a later batch; forced: it went past the bound after MaxWaits.
	wait, forced bool
}

// convert returns the profile's sample of r, whose stack is st.
func convert(r *sample, st *builtStack, k *kept) profile.Sample {
	s := profile.Sample{
		Kind: r.kind, PID: st.pid, TID: r.tid, CPU: r.cpu, ThreadName: k.comms.list[r.comm],
		Time: r.t.time(), Value: r.value, Link: r.link, State: stateNames[r.state],
		Frames: st.frames,
	}
	if r.attrs != 0 {
		s.Attrs = profile.Attrs(k.attrSets.list[r.attrs])
	}
	if r.kind == profile.OffCPU {
		s.Frames, s.Reason = st.trimmed, st.reason
		if r.reason != 0 {
			s.Reason = k.reasons.list[r.reason-1]
		}
	}
	return s
}

// stateNames are the strings of the thread states a record carries ("S",
// "D"), made once: empty for 0, as the record has no state.
var stateNames = func() (s [256]string) {
	for i := 1; i < len(s); i++ {
		s[i] = string(rune(i))
	}
	return s
}()

func (b *builder) process(pid uint32) *profile.Process {
	p := b.opts.Tracker.Get(pid)
	out := &profile.Process{
		PID:         pid,
		ExePath:     p.Exe,
		ExeName:     filepath.Base(p.Exe),
		ContainerID: p.ContainerID,
		ServiceName: p.Env["OTEL_SERVICE_NAME"],
		Attributes:  map[string]string{},
	}
	if p.Exe == "" {
		out.ExeName = p.Comm
	}
	if p.PodUID != "" {
		out.Attributes["k8s.pod.uid"] = p.PodUID
	}
	if b.opts.Resource != nil {
		service, attrs := b.opts.Resource(pid)
		for k, v := range attrs {
			if k != "service.name" {
				out.Attributes[k] = v
			}
		}
		if service != "" {
			out.ServiceName = service
		}
	}
	return out
}

// image returns the image a stack's user frames are symbolized against:
// the one its samples hold (gen), and whether it is still pid's entry,
// which may be read again for an address it lacks. A stack whose image is
// missing is counted and logged, and gets an image without mappings: its
// user frames stay addresses, never the names of another image.
func (b *builder) image(pid, gen uint32, stats *Stats) (p *proc.Process, current bool) {
	if gen != 0 {
		if p, current := b.opts.Tracker.Image(gen); p != nil {
			return p, current && p.PID == pid
		}
	}
	stats.ImagesMissing++
	if !b.missingLogged {
		b.missingLogged = true
		b.opts.Logger.Warn("process image missing at the report: the user frames of its stacks stay addresses (counted in images_missing)", "pid", pid, "gen", gen)
	}
	return &proc.Process{PID: pid, Exited: true}, false
}

// frames returns the symbolized stack, leaf first: kernel frames, then
// user frames. Every frame but the first of each part is a return
// address; it is looked up one byte earlier so that a call at the end of
// a function resolves to that function.
//
// A return address in none of the process's code mappings, once they are
// known to be complete, is no return address: the frame-pointer chain went
// through code that keeps no frame pointer (a loader or libc built
// without), and every frame after it was read from wherever that register
// pointed. The stack ends there and cut reports it. A live process is
// first read again, since it may have mapped a library since (dlopen).
//
// The user frames are those of p, the image the stack's samples hold;
// only the pid's current entry (current) is read again.
func (b *builder) frames(pid uint32, p *proc.Process, current bool, kern, user []uint64) (out []profile.Frame, cut bool) {
	out = make([]profile.Frame, 0, len(kern)+len(user))
	for i, a := range kern {
		if i > 0 {
			a--
		}
		out = append(out, b.kernelFrame(a)...)
	}
	for i, a := range user {
		if i > 0 {
			a--
		}
		m := p.Find(a)
		if m == nil && current && !p.Exited && !b.refreshed[pid] {
			b.refreshed[pid] = true
			p = b.opts.Tracker.Refresh(pid, refreshAge)
			m = p.Find(a)
		}
		if m == nil && i > 0 && !p.Partial && len(p.Mappings) > 0 && !b.perfMapped(p.PID, a) {
			return out, true
		}
		fs := b.userFrame(p, a)
		if b.wait {
			return nil, false
		}
		out = append(out, fs...)
	}
	return out, false
}

// perfMapped reports whether the process's perf map names addr: JIT code
// in memory the tracker has not seen mapped.
func (b *builder) perfMapped(pid uint32, addr uint64) bool {
	if b.opts.PerfMaps == nil {
		return false
	}
	_, ok := b.opts.PerfMaps.Lookup(pid, addr)
	return ok
}

func (b *builder) kernelFrame(addr uint64) []profile.Frame {
	k := addrKey{addr: addr}
	if f, ok := b.cache[k]; ok {
		return f
	}
	var fs []profile.Frame
	if b.opts.Kernel != nil {
		fs = b.opts.Kernel.Frames(nil, addr)
	} else {
		fs = []profile.Frame{{Address: addr, Mapping: b.kernel}}
	}
	b.cache[k] = fs
	return fs
}

func (b *builder) userFrame(p *proc.Process, addr uint64) []profile.Frame {
	k := addrKey{gen: p.Gen(), pid: p.PID, addr: addr}
	if f, ok := b.cache[k]; ok {
		return f
	}
	var fs []profile.Frame
	m := p.Find(addr)
	switch {
	case m == nil:
		// JIT code mapped after the process was first read is in no
		// known mapping; its perf map may still name it.
		fs = []profile.Frame{b.jitFrame(p.PID, addr, b.unknownMapping(p.PID))}
	case m.Anonymous() && m.Path == "":
		fs = []profile.Frame{b.jitFrame(p.PID, addr, b.mapping(p, m))}
	case m.Path == "[vdso]" && b.opts.VDSO.Covers(m.Start, m.End):
		fs = b.vdsoFrames(p, m, addr)
	case m.Anonymous() || m.Path[0] == '[':
		fs = []profile.Frame{{Address: addr, Mapping: b.mapping(p, m)}}
	case b.opts.Mode == symbolize.ModeNone:
		fs = []profile.Frame{b.addressFrame(p, m, addr)}
	default:
		mk := mapKey{gen: p.Gen(), pid: p.PID, start: m.Start}
		o, seen := b.objects[mk]
		if !seen {
			openPath := p.OpenPath(m)
			fresh := b.bound > 0 && !b.opts.Symbolizer.Parsed(openPath)
			if fresh && b.anyParsed && b.parsed >= b.bound && !b.force {
				b.wait = true
				return nil // not cached: a later batch names it
			}
			o.obj, o.err = b.opts.Symbolizer.Open(openPath, m.Path)
			if fresh {
				b.anyParsed = true
				if o.obj != nil {
					b.parsed += o.obj.Size()
				}
			}
			b.objects[mk] = o
		}
		pm := b.mapping(p, m)
		obj, err := o.obj, o.err
		if err != nil {
			b.opts.Logger.Debug("open object", "path", m.Path, "pid", p.PID, "error", err)
			fs = []profile.Frame{{Address: addr, Mapping: pm}}
		} else {
			if pm.BuildID == "" && pm.HTLHash == "" {
				setIdentity(pm, obj.Identity())
			}
			fs = ObjectFrames(nil, obj, pm, addr)
			if len(fs) == 1 {
				b.nameByStart(p, m, &fs[0])
			}
		}
	}
	b.cache[k] = fs
	return fs
}

// vdsoFrames names an address in the vDSO from the agent's own copy of
// the image, the same in every 64-bit process of this kernel.
func (b *builder) vdsoFrames(p *proc.Process, m *proc.Mapping, addr uint64) []profile.Frame {
	pm := b.mapping(p, m)
	obj, err := b.opts.Symbolizer.Open(b.opts.VDSO.Path(), "[vdso]")
	if err != nil {
		b.opts.Logger.Debug("open vDSO", "error", err)
		return []profile.Frame{{Address: addr, Mapping: pm}}
	}
	if pm.BuildID == "" {
		setIdentity(pm, obj.Identity())
	}
	if b.opts.Mode == symbolize.ModeNone {
		return []profile.Frame{{Address: addr, Mapping: pm}}
	}
	return ObjectFrames(nil, obj, pm, addr)
}

// jitFrame names an address in anonymous executable memory from the
// process's perf map (/tmp/perf-PID.map), or leaves it an address.
func (b *builder) jitFrame(pid uint32, addr uint64, pm *profile.Mapping) profile.Frame {
	f := profile.Frame{Address: addr, Mapping: pm}
	if b.opts.PerfMaps != nil && b.opts.Mode != symbolize.ModeNone {
		if name, ok := b.opts.PerfMaps.Lookup(pid, addr); ok {
			f.Function = name
		}
	}
	return f
}

// addressFrame is a frame left for a backend to symbolize: the address
// and a mapping carrying the file's build ID and offset, no name.
func (b *builder) addressFrame(p *proc.Process, m *proc.Mapping, addr uint64) profile.Frame {
	pm := b.mapping(p, m)
	if pm.BuildID == "" && pm.HTLHash == "" {
		if id, err := b.opts.Symbolizer.Identify(p.OpenPath(m)); err == nil {
			pm.BuildID, pm.HTLHash = id.BuildID, id.HTLHash
		} else {
			b.opts.Logger.Debug("identify object", "path", m.Path, "pid", p.PID, "error", err)
		}
	}
	return profile.Frame{Address: addr, Mapping: pm}
}

func (b *builder) mapping(p *proc.Process, m *proc.Mapping) *profile.Mapping {
	k := mapKey{gen: p.Gen(), start: m.Start}
	if pm, ok := b.mappings[k]; ok {
		return pm
	}
	path := m.Path
	if path == "" {
		path = "[anon]"
	}
	pm := &profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, Path: path}
	b.mappings[k] = pm
	return pm
}

func (b *builder) unknownMapping(pid uint32) *profile.Mapping {
	k := mapKey{pid: pid}
	if pm, ok := b.mappings[k]; ok {
		return pm
	}
	pm := &profile.Mapping{Path: fmt.Sprintf("[unknown:%d]", pid)}
	b.mappings[k] = pm
	return pm
}
