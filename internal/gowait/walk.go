package gowait

import "encoding/binary"

// Bounds of a stack walk, so a torn or hostile stack cannot make it loop
// or read without limit.
const (
	maxFrames    = 128
	maxStackRead = 64 << 10 // bytes of stack copied from sched.sp up
)

// gState is what one read of a runtime.g says.
type gState struct {
	goid          uint64
	status        uint32
	reason        uint8
	seq           uint8
	lo, hi        uint64
	sp, pc, bp    uint64
	labels        uint64
	stackReadSize int
}

// parked reports whether g is waiting: _Gwaiting, also while the garbage
// collector scans its stack (_Gscanwaiting), which leaves the stack as it
// is. _Gsyscall is not sampled here: that goroutine's thread is in the
// kernel, where the sched_switch sampler already sees it, with its labels.
func (g *gState) parked() bool { return g.status&^gScan == gWaiting }

const (
	gWaiting = 4
	gDead    = 6
	gScan    = 0x1000
)

// valid checks the saved registers against the goroutine's stack bounds:
// a g read while the runtime rewrote it (stack copy, reuse of a dead g)
// fails here rather than producing a wrong stack.
func (g *gState) valid() bool {
	return g.goid != 0 && g.lo != 0 && g.lo < g.hi && g.hi-g.lo <= 1<<30 &&
		g.lo <= g.sp && g.sp < g.hi && g.sp&7 == 0 && g.pc != 0 &&
		(g.bp == 0 || (g.sp <= g.bp && g.bp < g.hi && g.bp&7 == 0))
}

// sameStack reports whether b describes the same parked stack as g: same
// goroutine, not run in between (trackingSeq counts every stop), parked
// at the same place with the same labels.
func (g *gState) sameStack(b *gState) bool {
	return g.goid == b.goid && g.seq == b.seq && g.sp == b.sp && g.pc == b.pc &&
		g.bp == b.bp && g.lo == b.lo && g.hi == b.hi && g.labels == b.labels && g.parked() && b.parked()
}

// walkStack unwinds a parked goroutine by frame pointers in a copy of its
// stack: stack holds the bytes from g.sp up. The first pc is the saved
// g.sched.pc (a return address into runtime.gopark, or mcall's caller);
// each frame's saved bp is at bp and its return address at bp+8. Frame
// pointers must grow strictly towards hi, so the walk ends. complete says
// the walk reached the end of the chain (bp 0, at runtime.goexit's
// frame) rather than a bound or a pointer leaving the copy. left is the
// frame pointer that left the goroutine's stack [lo, hi), 0 if none: in a
// cgo callback it points into the thread's stack (nativeUnwinder).
func walkStack(g *gState, stack []byte) (pcs []uint64, complete bool, left uint64) {
	pcs = append(make([]uint64, 0, 16), g.pc)
	bp := g.bp
	for len(pcs) < maxFrames {
		if bp == 0 {
			return pcs, true, 0
		}
		off := bp - g.sp
		if bp < g.lo || bp >= g.hi {
			return pcs, false, bp
		}
		if bp < g.sp || off+16 > uint64(len(stack)) || bp&7 != 0 {
			return pcs, false, 0
		}
		next := binary.LittleEndian.Uint64(stack[off:])
		ret := binary.LittleEndian.Uint64(stack[off+8:])
		if ret == 0 {
			return pcs, true, 0
		}
		pcs = append(pcs, ret)
		if next != 0 && next <= bp && (next >= g.lo && next < g.hi) {
			return pcs, false, 0
		}
		bp = next
	}
	return pcs, false, 0
}

// parseG decodes a runtime.g prefix read with layout l.
func parseG(b []byte, l *layout) gState {
	u64 := func(off uint32) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	return gState{
		lo: u64(l.StackLo), hi: u64(l.StackHi),
		sp: u64(l.SchedSP), pc: u64(l.SchedPC), bp: u64(l.SchedBP),
		status: binary.LittleEndian.Uint32(b[l.Status:]),
		goid:   u64(l.GoID),
		reason: b[l.WaitReason],
		seq:    b[l.TrackingSeq],
		labels: u64(l.Labels),
	}
}
