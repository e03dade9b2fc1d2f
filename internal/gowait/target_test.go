package gowait

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// fakeMem is an address space of byte regions; before runs ahead of each
// ReadRanges call, so a test can change the target between reads as the
// running program would.
type fakeMem struct {
	regions map[uint64][]byte
	calls   int
	before  func(call int)
}

func (m *fakeMem) find(addr uint64, n int) []byte {
	for base, b := range m.regions {
		if addr >= base && addr+uint64(n) <= base+uint64(len(b)) {
			return b[addr-base : addr-base+uint64(n)]
		}
	}
	return nil
}

func (m *fakeMem) ReadAt(b []byte, off int64) (int, error) {
	src := m.find(uint64(off), len(b))
	if src == nil {
		return 0, fmt.Errorf("read %#x: unmapped", off)
	}
	return copy(b, src), nil
}

func (m *fakeMem) ReadRanges(addrs []uint64, out [][]byte, ok []bool) error {
	m.calls++
	if m.before != nil {
		m.before(m.calls)
	}
	for i, a := range addrs {
		_, err := m.ReadAt(out[i], int64(a))
		ok[i] = err == nil
	}
	return nil
}

func (m *fakeMem) put64(addr, v uint64) { binary.LittleEndian.PutUint64(m.find(addr, 8), v) }

// fakeGo builds a process with goroutines parked in a two-frame stack;
// goroutine i has goid i+1, its g at gBase+i*0x200 and its stack at
// stackBase+i*0x1000. The first one carries span labels.
const (
	allglenAddr = 0x500000
	allgptrAddr = 0x500008
	allgsAddr   = 0xc000010000
	gBase       = 0xc000020000
	stackBase   = 0xc000100000
	labelsAddr  = 0xc000200000
)

var fakeLayout, _ = tracectx.GoAllGInfoForTest(26)

func fakeGo(n int) (*fakeMem, *tracectx.GoAllGInfo) {
	l := fakeLayout.G
	m := &fakeMem{regions: map[uint64][]byte{
		allglenAddr: make([]byte, 16),
		allgsAddr:   make([]byte, 8*n),
		gBase:       make([]byte, 0x200*n),
		stackBase:   make([]byte, 0x1000*n),
		labelsAddr:  make([]byte, 0x1000),
	}}
	m.put64(allglenAddr, uint64(n))
	m.put64(allgptrAddr, allgsAddr)
	for i := 0; i < n; i++ {
		g, lo := uint64(gBase+i*0x200), uint64(stackBase+i*0x1000)
		m.put64(allgsAddr+uint64(8*i), g)
		sp := lo + 0xf00
		m.put64(g+uint64(l.StackLo), lo)
		m.put64(g+uint64(l.StackHi), lo+0x1000)
		m.put64(g+uint64(l.SchedSP), sp)
		m.put64(g+uint64(l.SchedPC), 0x401000)
		m.put64(g+uint64(l.SchedBP), sp+0x10)
		m.put64(g+uint64(l.GoID), uint64(i+1))
		binary.LittleEndian.PutUint32(m.find(g+uint64(l.Status), 4), gWaiting)
		m.find(g+uint64(l.WaitReason), 1)[0] = 7
		// frame at sp+0x10 → caller frame at sp+0x40 → end
		m.put64(sp+0x10, sp+0x40)
		m.put64(sp+0x18, 0x402000)
		m.put64(sp+0x40, 0)
		m.put64(sp+0x48, 0x403000)
	}
	// labels {trace_id, span_id} for goroutine 1, slice layout
	m.put64(gBase+uint64(l.Labels), labelsAddr)
	m.put64(labelsAddr, labelsAddr+0x100) // []label array
	m.put64(labelsAddr+8, 2)
	str := func(hdr, data uint64, s string) {
		copy(m.find(data, len(s)), s)
		m.put64(hdr, data)
		m.put64(hdr+8, uint64(len(s)))
	}
	str(labelsAddr+0x100, labelsAddr+0x400, "trace_id")
	str(labelsAddr+0x110, labelsAddr+0x500, "0123456789abcdef0123456789abcdef")
	str(labelsAddr+0x120, labelsAddr+0x600, "span_id")
	str(labelsAddr+0x130, labelsAddr+0x700, "0123456789abcdef")
	info := *fakeLayout
	info.AllGLen, info.AllGPtr = allglenAddr, allgptrAddr
	return m, &info
}

func TestTargetTick(t *testing.T) {
	l := fakeLayout.G
	span := linkOf(map[string]string{"trace_id": "0123456789abcdef0123456789abcdef", "span_id": "0123456789abcdef"})
	for _, tt := range []struct {
		name string
		// change runs before the first tick (call 0) and before each
		// ReadRanges call of it: 1 reads the g's, 2 the stacks, 3 the
		// g's again.
		change  func(m *fakeMem, call int)
		emitted int
		want    Stats
	}{
		{"all parked", nil, 3, Stats{Goroutines: 3, Waiting: 3}},
		{"one runs between reads", func(m *fakeMem, call int) {
			if call == 3 {
				m.find(gBase+0x200+uint64(l.TrackingSeq), 1)[0]++
			}
		}, 2, Stats{Goroutines: 3, Waiting: 3, DroppedChanged: 1}},
		{"one stack moved", func(m *fakeMem, call int) {
			if call == 3 {
				m.put64(gBase+0x400+uint64(l.SchedSP), stackBase+0x2f08)
			}
		}, 2, Stats{Goroutines: 3, Waiting: 3, DroppedChanged: 1}},
		{"one torn", func(m *fakeMem, call int) {
			if call == 1 {
				m.put64(gBase+0x200+uint64(l.SchedSP), 0x1234)
			}
		}, 2, Stats{Goroutines: 3, Waiting: 3, DroppedInvalid: 1}},
		{"one running, one dead", func(m *fakeMem, call int) {
			if call == 1 {
				binary.LittleEndian.PutUint32(m.find(gBase+0x200+uint64(l.Status), 4), 2)
				binary.LittleEndian.PutUint32(m.find(gBase+0x400+uint64(l.Status), 4), gDead)
			}
		}, 1, Stats{Goroutines: 2, Waiting: 1}},
		{"g unmapped", func(m *fakeMem, call int) {
			if call == 0 {
				m.put64(allgsAddr+16, 0xdead0000)
			}
		}, 2, Stats{Goroutines: 2, Waiting: 2, DroppedUnreadable: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, info := fakeGo(3)
			if tt.change != nil {
				tt.change(m, 0)
				m.before = func(call int) { tt.change(m, call) }
			}
			tg := newTarget(1, m, info, 0)
			var st Stats
			obs, err := tg.tick(&st)
			if err != nil {
				t.Fatal(err)
			}
			if len(obs) != tt.emitted || st != tt.want {
				t.Fatalf("%d observed, stats %+v; want %d, %+v", len(obs), st, tt.emitted, tt.want)
			}
			for _, o := range obs {
				wantLink := sampler.Link{}
				if o.g.st.goid == 1 {
					wantLink = span
				}
				if o.g.link != wantLink || o.reason != 7 || len(o.g.pcs) != 3 || o.g.pcs[2] != 0x403000 {
					t.Errorf("goroutine %d: link %v reason %d pcs %#x", o.g.st.goid, o.g.link, o.reason, o.g.pcs)
				}
			}
			// A second tick with nothing changed reuses every stack.
			m.before = nil
			st = Stats{}
			again, err := tg.tick(&st)
			if err != nil {
				t.Fatal(err)
			}
			if st.Cached != uint64(tt.emitted) || len(again) < tt.emitted {
				t.Errorf("second tick: %d cached of %d observed, want %d cached", st.Cached, len(again), tt.emitted)
			}
		})
	}
}
