package sampler

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// Kind tells an on-CPU tick from an off-CPU interval (enum sample_kind).
type Kind uint8

const (
	// OnCPU: a CPU-clock tick; Value is 1.
	OnCPU Kind = Kind(bpf.SamplerSampleKindSAMPLE_ON_CPU)
	// OffCPU: a blocked interval; Value is nanoseconds blocked.
	OffCPU Kind = Kind(bpf.SamplerSampleKindSAMPLE_OFF_CPU)
)

// Link is the W3C trace context the kernel read for a sample; zero when
// the thread was in no span.
type Link struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// ExecImage is where an exec's new image lies, as the kernel saw it at
// the exec: enough to lay out the executable's and its interpreter's code
// from their ELF headers when the process is gone before /proc/PID/maps
// can be read (a process living a millisecond).
type ExecImage struct {
	// Path is the file executed as the process saw it (for a script, its
	// interpreter); Dev and Inode name that file.
	Path  string
	Dev   string // "major:minor" in hex, as /proc/PID/maps shows it
	Inode uint64
	// Entry is the auxiliary vector's AT_ENTRY: the executable's load
	// bias plus its ELF entry point. InterpBase is AT_BASE: the dynamic
	// loader's load bias, 0 for a static executable.
	Entry, InterpBase uint64
	// InterpDev and InterpInode name the file mapped at InterpBase; the
	// loader is placed only when they are known (the same path can name
	// another file in the agent's mount namespace).
	InterpDev   string
	InterpInode uint64
}

// VMA is one executable mapping the kernel captured at an exit, as
// /proc/PID/maps would show it: the fields of proc.Mapping, in its order.
type VMA struct {
	Start, End, Offset uint64
	Dev                string
	Inode              uint64
	// Path is the file as the process saw it ("[vdso]" for the vDSO).
	Path string
}

// KernelDev formats a kernel dev_t (major << 20 | minor) the way
// /proc/PID/maps does.
func KernelDev(dev uint32) string {
	return fmt.Sprintf("%02x:%02x", dev>>20, dev&(1<<20-1))
}

// Record is one decoded kernel sample, with its time already converted to
// CLOCK_REALTIME. Slices are owned by the record.
type Record struct {
	Kind     Kind
	PID, TID uint32
	CPU      uint32
	Comm     string
	KTime    clock.KTime
	// Time is the wall-clock time of KTime: from the CLOCK_TAI read with
	// it where the kernel has one (TAI set), so that a step of the wall
	// clock after the sample does not move it; otherwise KTime converted.
	Time      time.Time
	TAI       bool
	Value     int64
	State     byte
	CtxSource bpf.SamplerCtxSource
	Link      Link

	UserIP, UserSP, UserBP uint64
	// UserLR is the link register (x30) on arm64, where a leaf keeps its
	// return address; 0 on x86-64.
	UserLR uint64
	// StackTop is the window: user memory from UserSP up, as the kernel
	// copied it (bpf/spanprof.h, STACK_WINDOW_MAX), for the unwinding of
	// code without frame pointers.
	StackTop []byte
	// UserStack and KernStack are leaf first, as the kernel returns them.
	UserStack, KernStack []uint64
	// UserErr and KernErr are the kernel's errno when a walk failed.
	UserErr, KernErr int32
	// PreExec: the sample was taken inside an exec before the new image's
	// registers were set, so its user registers and stack belong to the
	// image the process ran before (its parent's, for a vfork or
	// posix_spawn child), whatever its name and mappings are by now.
	// ParentPID is then the parent's pid, 0 otherwise.
	PreExec   bool
	ParentPID uint32
	// newImage: taken inside an exec in the new image (its registers
	// set), maybe before the exec event, which names the same execMM; the
	// reader hands it on after that event (Sampler.order).
	newImage bool
	execMM   uint32
	// CtxAttrs are the raw attributes of the thread-context record
	// (CtxSource CTX_THREAD), {key u8, len u8, value[len]}..., as the
	// kernel copied them; tracectx.ParseAttrs decodes them.
	CtxAttrs []byte
	// LocalRootSpanID is the Elastic APM transaction id of the span
	// (CtxSource CTX_ELASTIC), zero otherwise.
	LocalRootSpanID [8]byte
	// Reason is why an off-CPU interval waited when its producer knows
	// it (the Go runtime's wait reason of a parked goroutine, from
	// internal/gowait); empty for the kernel's samples, whose reason the
	// collector reads from the kernel stack.
	Reason string
}

// ProcEvent reports an exec or the exit of a whole process.
type ProcEvent struct {
	PID  uint32
	Exit bool
	// Fork: PID is a new process, forked by Parent; its image is its
	// parent's until it execs.
	Fork   bool
	Parent uint32
	// LinkMap: the dynamic loader changed the process's link map (a
	// library loaded or unloaded, through its debugger hook
	// _dl_debug_state; AttachLoader). Nothing else of the event is set
	// but PID and Time, and the process is the same.
	LinkMap bool
	Time    time.Time
	// execMM names an exec's new mm (low 32 bits of its address), as its
	// samples taken inside the exec do.
	execMM uint32
	// Image is where an exec's new image lies, nil for an exit.
	Image *ExecImage
	// Maps, for an exit, are the executable mappings the kernel captured
	// as the process exited (bpf/exitmaps.bpf.c), sorted by start; such an
	// exit comes as an event of its own, besides the plain one. Nil
	// otherwise.
	Maps []VMA
	// MapsDropped counts executable mappings the capture left out.
	MapsDropped int
	// Exe is the path of the executable among Maps, "" when unknown.
	Exe string
	// Read is an exec's process as the reader read it from /proc while
	// decoding the event (Options.Exec), for the consumer to apply; nil
	// for an exit or without Options.Exec.
	Read ExecRead
}

// Event is one record of the ring, decoded: exactly one of Sample and Proc
// is set. Events come in the order the programs reserved them in the ring,
// which per process is the order of what happened (docs/dataflow.md).
type Event struct {
	Sample *Record
	Proc   *ProcEvent
}

// ExecReader reads an exec'd process while it may still live (the
// process tracker, proc.Tracker.ExecReader): the reader calls ReadExec as
// it hands the exec on, and PlaceExec instead when a later exec, exit or
// fork of the pid came in the same read of the ring (the process's /proc
// shows what came after). What it returns rides in ProcEvent.Read to the
// consumer, which applies it.
type ExecReader interface {
	ReadExec(pid uint32, at time.Time, img *ExecImage) ExecRead
	PlaceExec(pid uint32, at time.Time, img *ExecImage) ExecRead
}

// ExecRead is a read of an exec'd process, opaque to the sampler: Discard
// releases one whose event is dropped.
type ExecRead interface {
	Discard()
}

// recordTagged marks the first word of the records that are neither
// samples nor proc_lifecycle (enum record_tag in bpf/spanprof.h): those
// start with a ktime_ns, which never has the top bit set.
const recordTagged = 1 << 63

var (
	sampleSize = int(unsafe.Sizeof(bpf.SamplerStackSample{}))
	procSize   = int(unsafe.Sizeof(bpf.SamplerProcLifecycle{}))
	// headerSize is where the window and then the frames start: records
	// are cut after the last frame used.
	headerSize = int(unsafe.Offsetof(bpf.SamplerStackSample{}.Data))
)

// Bounds of a record's data (bpf/spanprof.h): the window, then the
// frames.
const (
	WindowMax     = 8192 // STACK_WINDOW_MAX
	maxUserFrames = 127  // MAX_USER_FRAMES
	maxKernFrames = 64   // MAX_KERN_FRAMES
	maxCtxAttrs   = 612  // OTEL_CTX_MAX_ATTRS
)

// The data field holds the largest window, every frame and the largest
// attributes; a change of the C constants shows here at compile time.
var _ [0]struct{} = [len(bpf.SamplerStackSample{}.Data) - (WindowMax/8 + maxUserFrames + maxKernFrames + (maxCtxAttrs+7)/8)]struct{}{}

// decoder turns raw ring-buffer bytes into Records and ProcEvents. It
// belongs to one reader goroutine.
type decoder struct {
	conv *clock.Converter
	// comms interns thread names: a few distinct names make up nearly all
	// records, so a record's Comm costs a map lookup, not an allocation.
	comms map[[16]int8]string
	// pacMask is cleared from the user frames (readPACMask); pacUnknown
	// says the machine signs return addresses but the mask could not be
	// read, and pacUnstripped counts the user frames left with bits above
	// a 48-bit address space then.
	pacMask       uint64
	pacUnknown    bool
	pacUnstripped atomic.Uint64
}

// maxComms bounds the interned names; past it the table starts afresh.
const maxComms = 4096

func newDecoder(conv *clock.Converter) *decoder {
	return &decoder{conv: conv, comms: map[[16]int8]string{}}
}

// decode turns raw ring-buffer bytes into a Record or a ProcEvent. The
// layouts come from bpf2go, so the C header stays the one definition.
// It reads the record where it lies: only the header (everything before
// the frames) is copied into the struct, and the frames the record holds
// go straight into the one slice that backs both stacks. A record costs
// two allocations, the record with its stack top and the frames.
func (d *decoder) decode(raw []byte) (*Record, *ProcEvent, error) {
	if len(raw) >= 8 && binary.LittleEndian.Uint64(raw)&recordTagged != 0 {
		switch tag := bpf.SamplerRecordTag(binary.LittleEndian.Uint64(raw)); tag {
		case bpf.SamplerRecordTagREC_PROC_MAPS:
			pe, err := d.procMaps(raw)
			return nil, pe, err
		case bpf.SamplerRecordTagREC_PROC_EVENT:
			if len(raw) != procSize {
				return nil, nil, fmt.Errorf("decode record: process event of %d bytes, want %d", len(raw), procSize)
			}
			return nil, d.procEvent(raw), nil
		default:
			return nil, nil, fmt.Errorf("decode record: unknown tag %#x", uint64(tag))
		}
	}
	if len(raw) < headerSize || len(raw) > sampleSize || (len(raw)-headerSize)%8 != 0 {
		return nil, nil, fmt.Errorf("decode record: unexpected size %d", len(raw))
	}
	var s bpf.SamplerStackSample // header only; Data stays zero
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s)), headerSize), raw)
	wl := int(s.WindowLen)
	if wl%8 != 0 || wl > WindowMax || headerSize+wl > len(raw) {
		return nil, nil, fmt.Errorf("decode record: window of %d bytes in a record of %d", wl, len(raw))
	}
	used := (len(raw) - headerSize - wl) / 8
	nu := max(int(s.UserFrames), 0)
	nk := max(int(s.KernFrames), 0)
	na := int(s.AttrsLen)
	if na > maxCtxAttrs || nu+nk+(na+7)/8 > used {
		return nil, nil, fmt.Errorf("decode record: %d+%d frames and %d bytes of attributes in a record holding %d words", nu, nk, na, used)
	}
	r := &Record{
		Kind:      Kind(s.Kind),
		PID:       s.Pid,
		TID:       s.Tid,
		CPU:       s.Cpu,
		Comm:      d.comm(&s.Comm),
		KTime:     clock.KTime(s.KtimeNs),
		Value:     int64(s.Value),
		State:     s.State,
		CtxSource: bpf.SamplerCtxSource(s.CtxSource),
		UserIP:    s.UserIp,
		UserSP:    s.UserSp,
		UserBP:    s.UserBp,
		UserLR:    s.UserLr,
		PreExec:   s.Flags&uint8(bpf.SamplerSampleFlagSAMPLE_PRE_EXEC) != 0,
		ParentPID: s.ParentPid,
		newImage:  s.Flags&uint8(bpf.SamplerSampleFlagSAMPLE_NEW_IMAGE) != 0,
		execMM:    s.ExecMm,
	}
	if s.TaiNs != 0 {
		r.Time, r.TAI = d.conv.FromTAI(r.KTime, s.TaiNs), true
	} else {
		r.Time = d.conv.Time(r.KTime)
	}
	if r.CtxSource != bpf.SamplerCtxSourceCTX_NONE {
		r.Link.TraceID = s.TraceId
		r.Link.SpanID = s.SpanId
	}
	if r.CtxSource == bpf.SamplerCtxSourceCTX_ELASTIC {
		binary.LittleEndian.PutUint64(r.LocalRootSpanID[:], s.CtxRecord)
	}
	if na > 0 {
		at := headerSize + wl + 8*(nu+nk)
		r.CtxAttrs = append([]byte(nil), raw[at:at+na]...)
	}
	if s.UserFrames < 0 {
		r.UserErr = -s.UserFrames
	}
	if s.KernFrames < 0 {
		r.KernErr = -s.KernFrames
	}
	if nu+nk+wl > 0 {
		all := make([]uint64, nu+nk+wl/8)
		at := headerSize + wl
		for i := range nu + nk {
			all[i] = binary.LittleEndian.Uint64(raw[at+8*i:])
		}
		if d.pacMask != 0 || d.pacUnknown {
			d.stripPAC(all[:nu])
		}
		if nu > 0 {
			r.UserStack = all[:nu:nu]
		}
		if nk > 0 {
			r.KernStack = all[nu : nu+nk : nu+nk]
		}
		if wl > 0 {
			w := unsafe.Slice((*byte)(unsafe.Pointer(&all[nu+nk])), wl)
			r.StackTop = w[:copy(w, raw[headerSize:at]):wl]
		}
	}
	return r, nil, nil
}

// comm returns the thread name c holds, up to its first NUL.
func (d *decoder) comm(c *[16]int8) string {
	if s, ok := d.comms[*c]; ok {
		return s
	}
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	if len(d.comms) >= maxComms {
		clear(d.comms)
	}
	s := string(b)
	d.comms[*c] = s
	return s
}

// procEvent decodes an exec, exit, fork or link-map record.
func (d *decoder) procEvent(raw []byte) *ProcEvent {
	var e bpf.SamplerProcLifecycle
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&e)), procSize), raw)
	pe := &ProcEvent{PID: e.Pid, Exit: e.Kind == uint32(bpf.SamplerProcEventKindPROC_EXIT), Time: d.conv.Time(clock.KTime(e.KtimeNs))}
	switch e.Kind {
	case uint32(bpf.SamplerProcEventKindPROC_FORK):
		pe.Fork, pe.Parent = true, e.Parent
		return pe
	case uint32(bpf.SamplerProcEventKindPROC_LINKMAP):
		pe.LinkMap = true
		return pe
	}
	if pe.Exit {
		return pe
	}
	img := &ExecImage{Entry: e.Entry, InterpBase: e.InterpBase, Inode: e.ExeIno, Dev: KernelDev(e.ExeDev),
		InterpInode: e.InterpIno, InterpDev: KernelDev(e.InterpDev)}
	if n := int(e.PathLen); n > 1 && n <= len(e.Path) {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&e.Path[0])), n-1)
		img.Path = string(b)
	}
	pe.Image = img
	pe.execMM = e.ExecMm
	return pe
}

// stripPAC clears the pointer-authentication bits from user frames, or,
// without the mask, counts the frames that carry bits above a 48-bit
// address space.
func (d *decoder) stripPAC(frames []uint64) {
	for i := range frames {
		if d.pacUnknown {
			if frames[i]>>48 != 0 {
				d.pacUnstripped.Add(1)
			}
			continue
		}
		frames[i] &^= d.pacMask
	}
}
