package gowait

import (
	"debug/elf"
	"encoding/binary"
	"log/slog"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

// A goroutine parked inside a Go callback from C (cgo) has native frames,
// and they are not on its stack: runtime.cgocallback runs on the thread's
// own stack (m.g0, the pthread or main stack), switches to the
// goroutine's stack and calls cgocallbackg there, whose saved frame
// pointer is the address of cgocallback's frame on the thread's stack.
// Above that frame lie the C frames (crosscall2, the exported wrapper, the
// C code that called back, glibc's qsort, …) up to runtime.asmcgocall,
// where the Go caller switched to the thread's stack. C code has no frame
// pointers here (Debian's glibc, gcc -O2), so these frames are unwound by
// unwind.Walk with the same rule tables as kernel records (.eh_frame, Go's
// pcsp for crosscall2), in a bounded copy of the thread's stack.
const maxNativeRead = 16 << 10 // bytes of the thread's stack copied

// nativeUnwinder unwinds the C frames of cgo callbacks of one target.
type nativeUnwinder struct {
	logger *slog.Logger
	mem    Memory
	proc   func() *proc.Process
	tables *unwind.Cache
	// cgocallback and asmcgocall are the [start, end) of those runtime
	// functions (biased): where the native part starts and where it ends.
	cgocallback, asmcgocall [2]uint64
	objs                    map[string]nativeObj
	buf                     []byte
}

type nativeObj struct {
	progs []*elf.Prog
	key   string
}

// newNativeUnwinder returns nil for a binary without cgo callbacks.
func newNativeUnwinder(exe string, bias uint64, mem Memory, p func() *proc.Process, tables *unwind.Cache, log *slog.Logger) *nativeUnwinder {
	f, err := elf.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil
	}
	n := &nativeUnwinder{logger: log, mem: mem, proc: p, tables: tables, objs: map[string]nativeObj{}}
	for _, s := range syms {
		// The assembly functions are ABI0; their ABIInternal wrappers
		// (plain names, when present) are other code.
		switch s.Name {
		case "runtime.cgocallback.abi0":
			n.cgocallback = [2]uint64{s.Value + bias, s.Value + s.Size + bias}
		case "runtime.asmcgocall.abi0":
			n.asmcgocall = [2]uint64{s.Value + bias, s.Value + s.Size + bias}
		}
	}
	if n.cgocallback[1] == 0 || n.asmcgocall[1] == 0 {
		return nil
	}
	return n
}

func in(r [2]uint64, pc uint64) bool { return pc >= r[0] && pc < r[1] }

// unwind continues a goroutine's walk that left its stack: pc is the last
// frame found (a return address into runtime.cgocallback) and fp the
// frame pointer that left the stack (cgocallback's frame on the thread's
// stack). It returns the native frames above cgocallback, up to and
// including runtime.asmcgocall, and whether it reached asmcgocall. Frames
// below asmcgocall (the Go caller of C) are not recovered: the thread's
// stack holds no link back to them that a reader from outside can trust.
func (n *nativeUnwinder) unwind(pcs []uint64, fp uint64) ([]uint64, unwind.Result, bool) {
	if len(pcs) == 0 || !in(n.cgocallback, pcs[len(pcs)-1]) {
		return pcs, unwind.Result{Stop: unwind.StopNoInfo}, false
	}
	p := n.proc()
	lookup := func(q uint64) unwind.Rule {
		if in(n.asmcgocall, q) {
			// The Go caller switched stacks here: its frame is not
			// described by any rule on this stack.
			return unwind.Rule{Outermost: true}
		}
		return n.rule(p, q)
	}
	// cgocallback switched stack pointers, so its pcsp rule does not
	// hold here; its prologue did push the frame pointer, so fp is a
	// standard frame record on the thread's stack: the caller's frame
	// pointer at fp, the return address into crosscall2 at fp+8.
	var rec [16]byte
	if _, err := n.mem.ReadAt(rec[:], int64(fp)); err != nil {
		return pcs, unwind.Result{Stop: unwind.StopWindow}, false
	}
	sp := fp + 16
	ip := binary.LittleEndian.Uint64(rec[8:])
	fp = binary.LittleEndian.Uint64(rec[:])
	if cap(n.buf) < maxNativeRead {
		n.buf = make([]byte, maxNativeRead)
	}
	got, _ := n.mem.ReadAt(n.buf[:maxNativeRead], int64(sp))
	window := n.buf[:max(got, 0)]
	// crosscall2 has two frame records: it pushes the frame pointer
	// itself (PUSH_REGS_HOST_TO_ABI0), then the assembler's prologue
	// stores it again at the top of the frame it reserves and points the
	// frame pointer there. The inner record's return-address slot is the
	// outer record's saved frame pointer, a stack address: the inner
	// record's saved frame pointer points right above itself. The walk
	// goes on from the outer record, whose return address is crosscall2's.
	if off := fp - sp; fp >= sp && off+8 <= uint64(len(window)) && binary.LittleEndian.Uint64(window[off:]) == fp+8 {
		fp += 8
	}
	chain := []uint64{ip}
	for f := fp; len(chain) < maxFrames; {
		off := f - sp
		if f < sp || off+16 > uint64(len(window)) {
			break
		}
		chain = append(chain, binary.LittleEndian.Uint64(window[off+8:]))
		next := binary.LittleEndian.Uint64(window[off:])
		if next <= f {
			break
		}
		f = next
	}
	frames, res := unwind.Walk(unwind.Stack{IP: ip, SP: sp, FP: fp, Window: window, Chain: chain},
		lookup, pcs, maxFrames)
	reached := res.Stop == unwind.StopOutermost && in(n.asmcgocall, frames[len(frames)-1]-1)
	return frames, res, reached
}

// rule returns the unwind rule at pc, Rule{} where no table covers it.
func (n *nativeUnwinder) rule(p *proc.Process, pc uint64) unwind.Rule {
	m := p.Find(pc)
	if m == nil || m.Anonymous() {
		return unwind.Rule{}
	}
	path := p.OpenPath(m)
	o, ok := n.objs[path]
	if !ok {
		if ef, err := elf.Open(path); err == nil {
			o.progs = ef.Progs
			if id := symbolize.BuildID(ef); id != "" {
				o.key = "gnu:" + id
			} else {
				o.key = "path:" + path
			}
			ef.Close()
		}
		n.objs[path] = o
	}
	if o.key == "" {
		return unwind.Rule{}
	}
	vaddr, ok := symbolize.VirtualAddress(o.progs, symbolize.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset}, pc)
	if !ok {
		return unwind.Rule{}
	}
	t, err := n.tables.Table(o.key, path)
	if err != nil {
		return unwind.Rule{}
	}
	r, err := t.RuleAt(vaddr)
	if err != nil {
		return unwind.Rule{}
	}
	return r
}

// log says why a native walk stopped before asmcgocall (counted as
// Stats.NativeCut).
func (n *nativeUnwinder) log(res unwind.Result) {
	n.logger.Debug("goroutine in cgo callback: native frames cut", "stop", res.Stop.String(), "needed", res.Needed)
}
