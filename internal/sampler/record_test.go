package sampler

import (
	"testing"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// encode builds ring-buffer bytes as the programs do: the struct cut after
// the frames used.
func encode(s *bpf.SamplerStackSample, nu, nk int) []byte {
	all := unsafe.Slice((*byte)(unsafe.Pointer(s)), sampleSize)
	return append([]byte(nil), all[:headerSize+8*(nu+nk)]...)
}

func TestDecodeCompactRecord(t *testing.T) {
	conv := clock.NewConverter()
	var s bpf.SamplerStackSample
	s.Pid, s.Tid, s.Kind, s.Value = 10, 11, 0, 1
	s.UserFrames, s.KernFrames = 3, 2
	copy(s.Frames[:], []uint64{0x401000, 0x401100, 0x401200, 0xffffffff81000000, 0xffffffff81000100})
	s.CtxSource = uint8(bpf.SamplerCtxSourceCTX_THREAD)
	s.TraceId[0], s.SpanId[7] = 0xab, 0xcd
	s.StackTopLen = 16
	d := newDecoder(conv)
	r, pe, err := d.decode(encode(&s, 3, 2))
	if err != nil || pe != nil {
		t.Fatalf("decode: %v, %v", err, pe)
	}
	if len(r.UserStack) != 3 || r.UserStack[2] != 0x401200 || len(r.KernStack) != 2 || r.KernStack[1] != 0xffffffff81000100 {
		t.Fatalf("stacks user %x kernel %x", r.UserStack, r.KernStack)
	}
	if r.Link.TraceID[0] != 0xab || r.Link.SpanID[7] != 0xcd || len(r.StackTop) != 16 {
		t.Fatalf("link %+v, stack top %d bytes", r.Link, len(r.StackTop))
	}

	tests := []struct {
		name string
		raw  []byte
	}{
		{"frames beyond the record", encode(&s, 3, 1)},
		{"short", make([]byte, headerSize-8)},
		{"not whole frames", append(encode(&s, 3, 2), 1, 2, 3)},
	}
	for _, tt := range tests {
		if _, _, err := d.decode(tt.raw); err == nil {
			t.Errorf("%s: decoded without error", tt.name)
		}
	}

	s.UserFrames = -14 // EFAULT from the walk
	s.KernFrames = 0
	r, _, err = d.decode(encode(&s, 0, 0))
	if err != nil || r.UserErr != 14 || len(r.UserStack) != 0 {
		t.Fatalf("failed walk: record %+v, err %v", r, err)
	}
}
