package gowait

import (
	"encoding/binary"
	"slices"
	"testing"
)

// stackOf lays out frames as the runtime leaves them: frame i's saved bp
// at bps[i] and its return address at bps[i]+8, in a stack copy from sp.
func stackOf(sp uint64, size int, frames [][2]uint64) []byte {
	b := make([]byte, size)
	for _, f := range frames { // {bp address, return address}
		off := f[0] - sp
		binary.LittleEndian.PutUint64(b[off+8:], f[1])
	}
	// chain: each frame's saved bp points to the next frame's bp
	for i, f := range frames {
		next := uint64(0)
		if i+1 < len(frames) {
			next = frames[i+1][0]
		}
		binary.LittleEndian.PutUint64(b[f[0]-sp:], next)
	}
	return b
}

func TestWalkStack(t *testing.T) {
	const sp, hi = 0xc000100000, 0xc000102000
	good := [][2]uint64{{sp + 0x20, 0x401100}, {sp + 0x60, 0x401200}, {sp + 0x100, 0x401300}}
	loop := stackOf(sp, 0x200, good)
	binary.LittleEndian.PutUint64(loop[0x100:], sp+0x20) // last frame points back down
	for _, tt := range []struct {
		name     string
		bp       uint64
		stack    []byte
		want     []uint64
		complete bool
	}{
		{"chain to bp 0", sp + 0x20, stackOf(sp, 0x200, good), []uint64{0x400000, 0x401100, 0x401200, 0x401300}, true},
		{"no frame pointer", 0, stackOf(sp, 0x200, good), []uint64{0x400000}, true},
		{"bp below sp", sp - 0x10, stackOf(sp, 0x200, good), []uint64{0x400000}, false},
		{"bp past the copy", sp + 0x20, stackOf(sp, 0x200, good)[:0x80], []uint64{0x400000, 0x401100, 0x401200}, false},
		{"misaligned bp", sp + 0x21, stackOf(sp, 0x200, good), []uint64{0x400000}, false},
		{"chain loops back", sp + 0x20, loop, []uint64{0x400000, 0x401100, 0x401200, 0x401300}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gState{sp: sp, pc: 0x400000, bp: tt.bp, lo: sp - 0x1000, hi: hi}
			pcs, complete, _ := walkStack(&g, tt.stack)
			if !slices.Equal(pcs, tt.want) || complete != tt.complete {
				t.Errorf("walk = %#x complete %v, want %#x complete %v", pcs, complete, tt.want, tt.complete)
			}
		})
	}
}

func TestGStateValid(t *testing.T) {
	ok := gState{goid: 7, status: gWaiting, lo: 0xc000100000, hi: 0xc000102000, sp: 0xc000101f00, pc: 0x401000, bp: 0xc000101f40}
	for _, tt := range []struct {
		name   string
		change func(*gState)
		want   bool
	}{
		{"parked", func(*gState) {}, true},
		{"no frame pointer", func(g *gState) { g.bp = 0 }, true},
		{"sp outside the stack", func(g *gState) { g.sp = g.hi }, false},
		{"bp below sp", func(g *gState) { g.bp = g.sp - 8 }, false},
		{"bp past hi", func(g *gState) { g.bp = g.hi + 8 }, false},
		{"empty stack bounds", func(g *gState) { g.lo = g.hi }, false},
		{"huge stack", func(g *gState) { g.lo = 0x1000 }, false},
		{"no pc", func(g *gState) { g.pc = 0 }, false},
		{"misaligned sp", func(g *gState) { g.sp++ }, false},
		{"goid 0", func(g *gState) { g.goid = 0 }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := ok
			tt.change(&g)
			if got := g.valid(); got != tt.want {
				t.Errorf("valid() = %v, want %v for %+v", got, tt.want, g)
			}
		})
	}
}
