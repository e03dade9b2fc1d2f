package sampler

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// encode builds ring-buffer bytes as the programs do: the struct cut after
// the window and the frames used.
func encode(s *bpf.SamplerStackSample, nu, nk int) []byte {
	all := unsafe.Slice((*byte)(unsafe.Pointer(s)), sampleSize)
	return append([]byte(nil), all[:headerSize+int(s.WindowLen)+8*(nu+nk)]...)
}

// setFrames puts frames after s's window, as the programs do.
func setFrames(s *bpf.SamplerStackSample, frames []uint64) {
	copy(s.Data[s.WindowLen/8:], frames)
}

func TestDecodeCompactRecord(t *testing.T) {
	conv := clock.NewConverter()
	var s bpf.SamplerStackSample
	s.Pid, s.Tid, s.Kind, s.Value = 10, 11, 0, 1
	s.UserFrames, s.KernFrames = 3, 2
	s.WindowLen = 16
	s.Data[0], s.Data[1] = 0x1111, 0x2222
	setFrames(&s, []uint64{0x401000, 0x401100, 0x401200, 0xffffffff81000000, 0xffffffff81000100})
	s.CtxSource = uint8(bpf.SamplerCtxSourceCTX_THREAD)
	s.TraceId[0], s.SpanId[7] = 0xab, 0xcd
	d := newDecoder(conv)
	r, pe, err := d.decode(encode(&s, 3, 2))
	if err != nil || pe != nil {
		t.Fatalf("decode: %v, %v", err, pe)
	}
	if len(r.UserStack) != 3 || r.UserStack[2] != 0x401200 || len(r.KernStack) != 2 || r.KernStack[1] != 0xffffffff81000100 {
		t.Fatalf("stacks user %x kernel %x", r.UserStack, r.KernStack)
	}
	if r.Link.TraceID[0] != 0xab || r.Link.SpanID[7] != 0xcd || len(r.StackTop) != 16 ||
		binary.LittleEndian.Uint64(r.StackTop[8:]) != 0x2222 {
		t.Fatalf("link %+v, window %x", r.Link, r.StackTop)
	}
	if r.PreExec || r.ParentPID != 0 {
		t.Fatalf("plain sample decoded as pre-exec (parent %d)", r.ParentPID)
	}
	pre := s
	pre.Flags, pre.ParentPid = uint8(bpf.SamplerSampleFlagSAMPLE_PRE_EXEC), 9
	if r, _, err := d.decode(encode(&pre, 3, 2)); err != nil || !r.PreExec || r.ParentPID != 9 || r.PID != 10 {
		t.Fatalf("pre-exec sample decoded as %+v, err %v", r, err)
	}

	tests := []struct {
		name string
		raw  []byte
	}{
		{"frames beyond the record", encode(&s, 3, 1)},
		{"short", make([]byte, headerSize-8)},
		{"not whole frames", append(encode(&s, 3, 2), 1, 2, 3)},
		{"window beyond the record", encode(&s, 0, 0)[:headerSize+8]},
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

// TestDecodeAttrs: the record's attributes follow the frames, padded to
// whole words, with the largest window and every frame too.
func TestDecodeAttrs(t *testing.T) {
	d := newDecoder(clock.NewConverter())
	var s bpf.SamplerStackSample
	s.Pid, s.Tid, s.Value = 10, 11, 1
	s.CtxSource = uint8(bpf.SamplerCtxSourceCTX_THREAD)
	s.TraceId[0] = 1
	for _, tt := range []struct{ window, nu, nk, attrs int }{
		{0, 0, 0, 5}, {16, 3, 2, 12}, {WindowMax, maxUserFrames, maxKernFrames, maxCtxAttrs},
	} {
		s.WindowLen, s.UserFrames, s.KernFrames = uint32(tt.window), int32(tt.nu), int32(tt.nk)
		s.AttrsLen = uint16(tt.attrs)
		at := tt.window + 8*(tt.nu+tt.nk)
		data := unsafe.Slice((*byte)(unsafe.Pointer(&s.Data[0])), len(s.Data)*8)
		want := make([]byte, tt.attrs)
		for i := range want {
			want[i] = byte(i*7 + 3)
		}
		copy(data[at:], want)
		raw := encode(&s, tt.nu, tt.nk)
		raw = append(raw, data[at:at+(tt.attrs+7)&^7]...)
		r, _, err := d.decode(raw)
		if err != nil || string(r.CtxAttrs) != string(want) || len(r.UserStack) != tt.nu {
			t.Fatalf("%+v: attrs %x err %v, want %x", tt, r.CtxAttrs, err, want)
		}
		if _, _, err := d.decode(raw[:len(raw)-8]); err == nil {
			t.Errorf("%+v: record cut in its attributes decoded", tt)
		}
	}
	s.WindowLen, s.UserFrames, s.KernFrames, s.AttrsLen = 0, 0, 0, maxCtxAttrs+1
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&s)), sampleSize)
	if _, _, err := d.decode(raw[:headerSize+(maxCtxAttrs+8)&^7]); err == nil {
		t.Error("attributes beyond the 612 bytes of a record decoded")
	}
}

// TestDecodeEverySampleSize: a sample is cut after its last frame, so it
// has every size from its header to the whole struct; each must decode as
// the sample it is. When process events were told apart by their size, a
// sample of 10 frames had exactly theirs and was taken for an exec of pid 1.
func TestDecodeEverySampleSize(t *testing.T) {
	d := newDecoder(clock.NewConverter())
	var s bpf.SamplerStackSample
	s.KtimeNs, s.Value, s.Pid, s.Tid = 123456789, 1, 10, 11
	s.WindowLen = WindowMax // the largest window, then every frame
	frames := s.Data[WindowMax/8 : WindowMax/8+maxUserFrames+maxKernFrames]
	for i := range frames {
		frames[i] = 0x401000 + uint64(i)
	}
	for n := 0; n <= len(frames); n++ {
		nu := min(n, 127)
		s.UserFrames, s.KernFrames = int32(nu), int32(n-nu)
		r, pe, err := d.decode(encode(&s, nu, n-nu))
		if err != nil || pe != nil || r == nil || r.PID != 10 || len(r.UserStack)+len(r.KernStack) != n {
			t.Fatalf("sample of %d frames (%d bytes): record %v, process event %+v, err %v", n, headerSize+WindowMax+8*n, r, pe, err)
		}
	}
}

// An exec record carries the new image: entry, loader base, the files.
func TestDecodeExecImage(t *testing.T) {
	d := newDecoder(clock.NewConverter())
	var e bpf.SamplerProcLifecycle
	e.Tag = uint64(bpf.SamplerRecordTagREC_PROC_EVENT)
	e.Pid, e.Kind = 42, uint32(bpf.SamplerProcEventKindPROC_EXEC)
	e.Entry, e.InterpBase = 0x55550000_1040, 0x7f00_0000_0000
	e.ExeIno, e.ExeDev = 1234, 8<<20|1
	e.InterpIno, e.InterpDev = 99, 0xfd<<20|2
	path := "/usr/bin/true"
	for i := range path {
		e.Path[i] = int8(path[i])
	}
	e.PathLen = uint32(len(path) + 1)
	raw := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&e)), procSize)...)
	r, pe, err := d.decode(raw)
	if err != nil || r != nil || pe == nil || pe.Exit || pe.PID != 42 || pe.Image == nil {
		t.Fatalf("decode exec: %v %v %+v", err, r, pe)
	}
	img := *pe.Image
	if img.Path != path || img.Entry != e.Entry || img.InterpBase != e.InterpBase ||
		img.Inode != 1234 || img.Dev != "08:01" || img.InterpInode != 99 || img.InterpDev != "fd:02" {
		t.Errorf("image %+v", img)
	}
	e.Kind = uint32(bpf.SamplerProcEventKindPROC_EXIT)
	raw = append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&e)), procSize)...)
	if _, pe, _ := d.decode(raw); pe == nil || !pe.Exit || pe.Image != nil {
		t.Errorf("exit decoded as %+v", pe)
	}
}
