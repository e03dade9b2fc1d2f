package gowait

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/internal/unwind"
)

type layout = tracectx.GoGLayout

// maxGoroutines bounds allglen: a larger value is a torn or wrong read.
const maxGoroutines = 1 << 22

// target is one Go process being sampled.
type target struct {
	pid  uint32
	mem  Memory
	info *tracectx.GoAllGInfo
	bias uint64 // load bias of a PIE executable
	// native unwinds the C frames of goroutines parked in cgo callbacks;
	// nil for a binary without cgo.
	native *nativeUnwinder
	span   uint32 // bytes of g read per goroutine

	// cache holds, per index in allgs, the last parked stack read there;
	// it holds while the goroutine stays parked (gState.sameStack). The
	// runtime only appends to allgs, so an index keeps naming one g.
	cache []*parkedG
	// stacks interns stacks: equal pcs get one id, for aggregation.
	stacks map[string]int

	// Scratch reused across ticks.
	addrs  []uint64
	bufs   [][]byte
	ok     []bool
	gbuf   []byte
	arr    []byte
	gs     []uint64
	states []gState
}

// parkedG is a goroutine's parked stack and labels as last read.
type parkedG struct {
	addr  uint64 // the g
	st    gState
	pcs   []uint64
	stack int // interned pcs
	link  sampler.Link
}

// observed is one waiting goroutine found by a tick, with its
// g.waitreason (which may change while the stack stays put: a select
// parks where a receive would). held says it was parked at the same place
// and has not run since an earlier tick read it: it waited through the
// whole time since the previous tick.
type observed struct {
	g      *parkedG
	reason uint8
	held   bool
}

func newTarget(pid uint32, mem Memory, info *tracectx.GoAllGInfo, bias uint64) *target {
	return &target{pid: pid, mem: mem, info: info, bias: bias, span: info.G.Span(), stacks: map[string]int{}}
}

// tick reads every goroutine of the target once and returns the waiting
// ones. Reads race with the running program, so everything read is
// checked: the g's registers against its stack bounds, and a goroutine
// whose stack was read afresh is read again afterwards and kept only if
// it is still parked at the same place, with the same id.
func (t *target) tick(st *Stats) ([]observed, error) {
	gs, err := t.allGs()
	if err != nil {
		return nil, err
	}
	states, err := t.readGs(gs, t.states[:0], st)
	if err != nil {
		return nil, err
	}
	t.states = states
	if len(t.cache) < len(gs) {
		t.cache = append(t.cache, make([]*parkedG, len(gs)-len(t.cache))...)
	}
	var out []observed
	var fresh []int // indexes into gs whose stack must be read
	for i := range gs {
		g := &states[i]
		c := t.cache[i]
		t.cache[i] = nil // kept below if still parked there
		if g.goid == 0 {
			continue // unreadable, or dead and never used
		}
		if g.status&^gScan == gDead {
			continue
		}
		st.Goroutines++
		if !g.parked() {
			continue
		}
		st.Waiting++
		if !g.valid() {
			st.DroppedInvalid++
			continue
		}
		if c != nil && c.addr == gs[i] && c.st.sameStack(g) {
			t.cache[i] = c
			st.Cached++
			out = append(out, observed{g: c, reason: g.reason, held: true})
			continue
		}
		fresh = append(fresh, i)
	}
	if len(fresh) > 0 {
		parked, err := t.readStacks(gs, states, fresh, st)
		if err != nil {
			return nil, err
		}
		for _, p := range parked {
			out = append(out, observed{g: p, reason: p.st.reason})
		}
	}
	return out, nil
}

// allGs reads allglen, then allgptr, then the array of g pointers.
func (t *target) allGs() ([]uint64, error) {
	var n, p [8]byte
	if _, err := t.mem.ReadAt(n[:], int64(t.info.AllGLen+t.bias)); err != nil {
		return nil, fmt.Errorf("read runtime.allglen: %w", err)
	}
	if _, err := t.mem.ReadAt(p[:], int64(t.info.AllGPtr+t.bias)); err != nil {
		return nil, fmt.Errorf("read runtime.allgptr: %w", err)
	}
	count, ptr := binary.LittleEndian.Uint64(n[:]), binary.LittleEndian.Uint64(p[:])
	if count == 0 || ptr == 0 {
		return nil, nil // the runtime has not started yet
	}
	if count > maxGoroutines {
		return nil, fmt.Errorf("read runtime.allglen: %d goroutines", count)
	}
	t.arr = slices.Grow(t.arr[:0], int(8*count))[:8*count]
	if _, err := t.mem.ReadAt(t.arr, int64(ptr)); err != nil {
		return nil, fmt.Errorf("read allgs: %w", err)
	}
	t.gs = slices.Grow(t.gs[:0], int(count))[:count]
	for i := range t.gs {
		t.gs[i] = binary.LittleEndian.Uint64(t.arr[8*i:])
	}
	return t.gs, nil
}

// readGs reads the g prefix of every address in one batch and appends
// their states to dst; an unreadable g gets the zero state.
func (t *target) readGs(gs []uint64, dst []gState, st *Stats) ([]gState, error) {
	span := int(t.span)
	if cap(t.gbuf) < span*len(gs) {
		t.gbuf = make([]byte, span*len(gs))
	}
	t.addrs, t.bufs, t.ok = t.addrs[:0], t.bufs[:0], t.ok[:0]
	for i, a := range gs {
		t.addrs = append(t.addrs, a)
		b := t.gbuf[i*span : (i+1)*span]
		if a == 0 {
			b = b[:0]
		}
		t.bufs = append(t.bufs, b)
		t.ok = append(t.ok, false)
	}
	if err := t.mem.ReadRanges(t.addrs, t.bufs, t.ok); err != nil {
		return nil, err
	}
	for i := range gs {
		var g gState
		if t.ok[i] {
			g = parseG(t.bufs[i], &t.info.G)
		} else if gs[i] != 0 {
			st.DroppedUnreadable++
		}
		dst = append(dst, g)
	}
	return dst, nil
}

// readStacks copies the stacks of the fresh goroutines in one batch,
// walks them, reads their labels, then re-reads their g and keeps those
// that did not move meanwhile.
func (t *target) readStacks(gs []uint64, states []gState, fresh []int, st *Stats) ([]*parkedG, error) {
	addrs := make([]uint64, len(fresh))
	bufs := make([][]byte, len(fresh))
	ok := make([]bool, len(fresh))
	for k, i := range fresh {
		g := &states[i]
		addrs[k] = g.sp
		bufs[k] = make([]byte, min(g.hi-g.sp, maxStackRead))
	}
	if err := t.mem.ReadRanges(addrs, bufs, ok); err != nil {
		return nil, err
	}
	parked := make([]*parkedG, 0, len(fresh))
	kept := make([]int, 0, len(fresh))
	for k, i := range fresh {
		if !ok[k] {
			st.DroppedUnreadable++
			continue
		}
		g := states[i]
		pcs, complete, left := walkStack(&g, bufs[k])
		if !complete && left != 0 && t.native != nil {
			var res unwind.Result
			var reached bool
			n := len(pcs)
			pcs, res, reached = t.native.unwind(pcs, left)
			if len(pcs) > n {
				st.NativeFrames += uint64(len(pcs) - n)
			}
			if reached {
				st.NativeCallbacks++
			} else {
				st.NativeCut++
				t.native.log(res)
			}
		}
		if !complete {
			st.Truncated++
		}
		p := &parkedG{addr: gs[i], st: g, pcs: pcs, stack: t.intern(pcs)}
		if g.labels != 0 && t.info.Labels != nil {
			labels, err := tracectx.ReadGoLabelSet(t.mem, g.labels, t.info.Labels)
			if err != nil {
				st.DroppedLabels++
				continue
			}
			p.link = linkOf(labels)
		}
		parked = append(parked, p)
		kept = append(kept, i)
	}
	// Read the g's again: a goroutine that ran, moved its stack or died
	// while its stack was copied is dropped, not misreported.
	again, err := t.readGs(pick(gs, kept), nil, st)
	if err != nil {
		return nil, err
	}
	out := parked[:0]
	for k, p := range parked {
		if !again[k].sameStack(&p.st) || again[k].reason != p.st.reason {
			st.DroppedChanged++
			continue
		}
		t.cache[kept[k]] = p
		out = append(out, p)
	}
	return out, nil
}

func (t *target) reason(r uint8) string {
	if int(r) < len(t.info.WaitReasons) && t.info.WaitReasons[r] != "" {
		return t.info.WaitReasons[r]
	}
	return fmt.Sprintf("wait reason %d", r)
}

func pick(gs []uint64, idx []int) []uint64 {
	out := make([]uint64, len(idx))
	for k, i := range idx {
		out[k] = gs[i]
	}
	return out
}

// intern returns the id of a stack, the same for equal pcs.
func (t *target) intern(pcs []uint64) int {
	b := make([]byte, 8*len(pcs))
	for i, pc := range pcs {
		binary.LittleEndian.PutUint64(b[8*i:], pc)
	}
	id, ok := t.stacks[string(b)]
	if !ok {
		id = len(t.stacks)
		t.stacks[string(b)] = id
	}
	return id
}

// linkOf returns the span the SDK's labels name; a goroutine with other
// labels, or malformed ids, is in no span.
func linkOf(labels map[string]string) sampler.Link {
	var l sampler.Link
	tid, sid := labels["trace_id"], labels["span_id"]
	if len(tid) != 32 || len(sid) != 16 {
		return sampler.Link{}
	}
	if _, err := hex.Decode(l.TraceID[:], []byte(tid)); err != nil {
		return sampler.Link{}
	}
	if _, err := hex.Decode(l.SpanID[:], []byte(sid)); err != nil {
		return sampler.Link{}
	}
	return l
}
