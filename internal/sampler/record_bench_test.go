package sampler

import (
	"testing"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// rawSample returns the ring-buffer bytes of an on-CPU sample with the
// given stack depths, as the programs send them: user frames, then kernel
// frames, the struct cut after the last one.
func rawSample(user, kern int) []byte {
	var s bpf.SamplerStackSample
	s.KtimeNs = 123456789
	s.Pid, s.Tid, s.Cpu = 4242, 4243, 1
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s.Comm[0])), len(s.Comm)), "bench-worker")
	s.CtxSource = 1
	s.TraceId[0], s.SpanId[0] = 1, 2
	s.UserIp, s.UserSp, s.UserBp = 0x401000, 0x7ffd0000, 0x7ffd0040
	s.WindowLen = 1024 // the first chunk, which every sample carries
	fo := int(s.WindowLen / 8)
	for i := range user {
		s.Data[fo+i] = 0x401000 + uint64(i)*0x40
	}
	for i := range kern {
		s.Data[fo+user+i] = 0xffffffff81000000 + uint64(i)*0x40
	}
	s.UserFrames, s.KernFrames = int32(user), int32(kern)
	return encode(&s, user, kern)
}

// BenchmarkDecode is the user-space cost per ring-buffer record before it
// reaches the collector: layout cast, clock conversion, and the copies of
// the stacks and the stack top out of the reused read buffer.
func BenchmarkDecode(b *testing.B) {
	d := newDecoder(clock.NewConverter())
	tests := []struct {
		name       string
		user, kern int
	}{
		{"user8-kern0", 8, 0},
		{"user32-kern12", 32, 12},
		{"user127-kern64", 127, 64},
	}
	for _, tt := range tests {
		raw := rawSample(tt.user, tt.kern)
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				r, _, err := d.decode(raw)
				if err != nil || len(r.UserStack) != tt.user {
					b.Fatalf("decode: %v, %d user frames", err, len(r.UserStack))
				}
			}
		})
	}
}
