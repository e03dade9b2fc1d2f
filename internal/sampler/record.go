package sampler

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
	"github.com/spanprof/spanprof/internal/profile"
)

// Record is one decoded kernel sample, with its time already converted to
// CLOCK_REALTIME. Slices are owned by the record.
type Record struct {
	Kind      profile.Kind
	PID, TID  uint32
	CPU       uint32
	Comm      string
	KTime     clock.KTime
	Time      time.Time
	Value     int64
	State     byte
	CtxSource bpf.SamplerCtxSource
	Link      profile.Link

	UserIP, UserSP, UserBP uint64
	StackTop               []byte
	// UserStack and KernStack are leaf first, as the kernel returns them.
	UserStack, KernStack []uint64
	// UserErr and KernErr are the kernel's errno when a walk failed.
	UserErr, KernErr int32
}

// ProcEvent reports an exec or the exit of a whole process.
type ProcEvent struct {
	PID  uint32
	Exit bool
	Time time.Time
}

var (
	sampleSize = int(unsafe.Sizeof(bpf.SamplerStackSample{}))
	procSize   = int(unsafe.Sizeof(bpf.SamplerProcLifecycle{}))
	// headerSize is where the frames start: records are cut after the last
	// frame used.
	headerSize = int(unsafe.Offsetof(bpf.SamplerStackSample{}.Frames))
)

// decode turns raw ring-buffer bytes into a Record or a ProcEvent. The
// layouts come from bpf2go, so the C header stays the one definition.
func decode(raw []byte, conv *clock.Converter) (*Record, *ProcEvent, error) {
	if len(raw) == procSize {
		kt := clock.KTime(binary.LittleEndian.Uint64(raw[0:]))
		pid := binary.LittleEndian.Uint32(raw[8:])
		kind := bpf.SamplerProcEventKind(binary.LittleEndian.Uint32(raw[12:]))
		return nil, &ProcEvent{PID: pid, Exit: kind == bpf.SamplerProcEventKindPROC_EXIT, Time: conv.Time(kt)}, nil
	}
	if len(raw) < headerSize || len(raw) > sampleSize || (len(raw)-headerSize)%8 != 0 {
		return nil, nil, fmt.Errorf("decode record: unexpected size %d", len(raw))
	}
	var s bpf.SamplerStackSample
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s)), sampleSize), raw)
	r := &Record{
		Kind:      profile.Kind(s.Kind),
		PID:       s.Pid,
		TID:       s.Tid,
		CPU:       s.Cpu,
		Comm:      commString(&s.Comm),
		KTime:     clock.KTime(s.KtimeNs),
		Value:     int64(s.Value),
		State:     s.State,
		CtxSource: bpf.SamplerCtxSource(s.CtxSource),
		UserIP:    s.UserIp,
		UserSP:    s.UserSp,
		UserBP:    s.UserBp,
	}
	r.Time = conv.Time(r.KTime)
	if r.CtxSource != bpf.SamplerCtxSourceCTX_NONE {
		r.Link.TraceID = s.TraceId
		r.Link.SpanID = s.SpanId
	}
	if n := int(s.StackTopLen); n > 0 && n <= len(s.StackTop) {
		r.StackTop = append([]byte(nil), s.StackTop[:n]...)
	}
	used := (len(raw) - headerSize) / 8
	nu := max(int(s.UserFrames), 0)
	nk := max(int(s.KernFrames), 0)
	if nu+nk > used {
		return nil, nil, fmt.Errorf("decode record: %d+%d frames in a record holding %d", nu, nk, used)
	}
	r.UserStack, r.UserErr = frames(s.Frames[:nu], s.UserFrames)
	r.KernStack, r.KernErr = frames(s.Frames[nu:nu+nk], s.KernFrames)
	return r, nil, nil
}

func frames(all []uint64, n int32) ([]uint64, int32) {
	if n < 0 {
		return nil, -n
	}
	if int(n) > len(all) {
		n = int32(len(all))
	}
	return append([]uint64(nil), all[:n]...), 0
}

func commString(c *[16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}
