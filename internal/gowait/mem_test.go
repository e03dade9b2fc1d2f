package gowait

import (
	"bytes"
	"os"
	"testing"
	"unsafe"
)

// TestProcessMemoryReadRanges reads this process's own memory (allowed
// without privileges): neighbouring ranges merged into one run, an
// unmapped range in the same batch failing alone, and the same batch
// read twice through its kept plan.
func TestProcessMemoryReadRanges(t *testing.T) {
	block := make([]byte, 8192)
	for i := range block {
		block[i] = byte(i * 7)
	}
	base := uint64(uintptr(unsafe.Pointer(&block[0])))
	for _, tt := range []struct {
		name   string
		offs   []int // -1: an unmapped address
		length int
	}{
		{"merged neighbours", []int{0, 100, 600, 4000, 8000}, 64},
		{"overlapping", []int{10, 20, 30}, 100},
		{"unmapped in between", []int{0, -1, 200, -1, 7000}, 32},
		{"out of order", []int{7000, 0, 3000, 10}, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := newProcessMemory(os.Getpid())
			for round := 0; round < 2; round++ {
				addrs := make([]uint64, len(tt.offs))
				out := make([][]byte, len(tt.offs))
				ok := make([]bool, len(tt.offs))
				for i, o := range tt.offs {
					addrs[i] = base + uint64(o)
					if o < 0 {
						addrs[i] = 0x1000 // never mapped
					}
					out[i] = make([]byte, tt.length)
				}
				if err := mem.ReadRanges(addrs, out, ok); err != nil {
					t.Fatal(err)
				}
				for i, o := range tt.offs {
					if ok[i] != (o >= 0) {
						t.Fatalf("round %d: range %d (offset %d) ok=%v", round, i, o, ok[i])
					}
					if o >= 0 && !bytes.Equal(out[i], block[o:o+tt.length]) {
						t.Errorf("round %d: range %d (offset %d) read wrong bytes", round, i, o)
					}
				}
			}
		})
	}
}
