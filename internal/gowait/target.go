package gowait

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/tracectx"
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
	span uint32 // bytes of g read per goroutine

	// cache holds, per g address, the last parked stack read there; it
	// holds while the goroutine stays parked (gState.sameStack).
	cache map[uint64]*parkedG
	gen   uint64

	// Scratch reused across ticks.
	addrs []uint64
	bufs  [][]byte
	ok    []bool
	gbuf  []byte
}

// parkedG is a goroutine's parked stack and labels as last read.
type parkedG struct {
	st   gState
	pcs  []uint64
	key  string // pcs as bytes: the stack's identity for aggregation
	link profile.Link
	gen  uint64
}

// observed is one waiting goroutine found by a tick.
type observed struct {
	g      *parkedG
	reason string
}

func newTarget(pid uint32, mem Memory, info *tracectx.GoAllGInfo, bias uint64) *target {
	return &target{pid: pid, mem: mem, info: info, bias: bias, span: info.G.Span(), cache: map[uint64]*parkedG{}}
}

// tick reads every goroutine of the target once and returns the waiting
// ones. Reads race with the running program, so everything read is
// checked: the g's registers against its stack bounds, and a goroutine
// whose stack was read afresh is read again afterwards and kept only if
// it is still parked at the same place, with the same id.
func (t *target) tick(st *Stats) ([]observed, error) {
	t.gen++
	gs, err := t.allGs()
	if err != nil {
		return nil, err
	}
	states, err := t.readGs(gs, st)
	if err != nil {
		return nil, err
	}
	var out []observed
	var fresh []int // indexes into gs whose stack must be read
	for i := range gs {
		g := &states[i]
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
		if c := t.cache[gs[i]]; c != nil && c.st.sameStack(g) {
			c.gen = t.gen
			st.Cached++
			out = append(out, observed{g: c, reason: t.reason(g.reason)})
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
			out = append(out, observed{g: p, reason: t.reason(p.st.reason)})
		}
	}
	for addr, c := range t.cache {
		if c.gen != t.gen {
			delete(t.cache, addr)
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
	arr := make([]byte, 8*count)
	if _, err := t.mem.ReadAt(arr, int64(ptr)); err != nil {
		return nil, fmt.Errorf("read allgs: %w", err)
	}
	gs := make([]uint64, count)
	for i := range gs {
		gs[i] = binary.LittleEndian.Uint64(arr[8*i:])
	}
	return gs, nil
}

// readGs reads the g prefix of every address in one batch; an unreadable
// g gets the zero state.
func (t *target) readGs(gs []uint64, st *Stats) ([]gState, error) {
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
	out := make([]gState, len(gs))
	for i := range gs {
		if !t.ok[i] {
			if gs[i] != 0 {
				st.DroppedUnreadable++
			}
			continue
		}
		out[i] = parseG(t.bufs[i], &t.info.G)
	}
	return out, nil
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
		pcs, complete := walkStack(&g, bufs[k])
		if !complete {
			st.Truncated++
		}
		p := &parkedG{st: g, pcs: pcs, key: stackKey(pcs), gen: t.gen}
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
	again, err := t.readGs(pick(gs, kept), st)
	if err != nil {
		return nil, err
	}
	out := parked[:0]
	for k, p := range parked {
		if !again[k].sameStack(&p.st) || again[k].reason != p.st.reason {
			st.DroppedChanged++
			continue
		}
		t.cache[gs[kept[k]]] = p
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

func stackKey(pcs []uint64) string {
	b := make([]byte, 8*len(pcs))
	for i, pc := range pcs {
		binary.LittleEndian.PutUint64(b[8*i:], pc)
	}
	return string(b)
}

// linkOf returns the span the SDK's labels name; a goroutine with other
// labels, or malformed ids, is in no span.
func linkOf(labels map[string]string) profile.Link {
	var l profile.Link
	tid, sid := labels["trace_id"], labels["span_id"]
	if len(tid) != 32 || len(sid) != 16 {
		return profile.Link{}
	}
	if _, err := hex.Decode(l.TraceID[:], []byte(tid)); err != nil {
		return profile.Link{}
	}
	if _, err := hex.Decode(l.SpanID[:], []byte(sid)); err != nil {
		return profile.Link{}
	}
	return l
}
