// Package sampler loads the eBPF programs, attaches them to the CPU clock
// and the scheduler, and turns ring-buffer records into decoded samples.
package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// PinDir is where maps shared with other programs are pinned.
const PinDir = "/sys/fs/bpf/spanprof"

// pollInterval bounds how long a record waits in the ring buffer. The
// programs wake the reader once the ring holds 1 MiB, so this only sets
// the latency of a trickle; every pass costs thread wake-ups (the reader,
// the consumer, the runtime's sysmon), so it is not shorter than the
// consumers need: record reads at the end, the agent every report.
const pollInterval = 200 * time.Millisecond

// OTelTracesMapPin is where the OTel eBPF Instrumentation pins its map of
// the spans each thread is in (key pid_tgid, value trace_id[16] span_id[8]).
const OTelTracesMapPin = "/sys/fs/bpf/otel/traces_ctx_v1"

// Options configure a Sampler.
type Options struct {
	// Frequency is the on-CPU sampling frequency in Hz per CPU.
	Frequency int
	// PIDs limits sampling to these processes; empty means all.
	PIDs []int
	// Queue is the capacity of the hand-off channel; records beyond it
	// are dropped and counted.
	Queue int
	// OffCPU enables and tunes off-CPU sampling on sched_switch.
	OffCPU OffCPUOptions
	// RingBytes sizes the ring buffer the programs write to (a power of
	// two, at least 2 MiB: the reader is woken at 1 MiB); 0 keeps the
	// 8 MiB of the object.
	RingBytes int
	// NewProcessWindow is how many bytes of stack, from the stack
	// pointer, the programs copy with each sample of a process no window
	// was set for (SetStackWindow): a consumer that sizes each process's
	// window from what its first samples needed (collect) asks for
	// WindowMax, so that those first stacks are not cut before it has a
	// size. 0 copies the first 1 KiB, as for a process set to 0.
	NewProcessWindow uint32
	Logger           *slog.Logger
	// OTelMapPin is where the OTel eBPF Instrumentation's traces_ctx_v1
	// map is looked for; "" is OTelTracesMapPin.
	OTelMapPin string
	Clock      *clock.Converter
	// Exec, if set, reads an exec'd process from /proc as the reader
	// decodes the exec event, before the records after it: a short-lived
	// process must be read before it is gone. The read travels inside the
	// event (ProcEvent.Read) for the consumer to apply in stream order.
	Exec ExecReader

	// compat loads the compat object where the default one would do: the
	// tests run it on the development machines' kernel.
	compat bool
}

// Sampler owns the loaded programs and the ring-buffer reader.
type Sampler struct {
	log    *slog.Logger
	dec    *decoder // used by Run only
	objs   bpf.SamplerObjects
	links  []link.Link
	perf   []int
	reader *ringbuf.Reader
	freq   int
	exec   ExecReader
	// ring wakes Run for the kernel's wake-ups, its poll deadline and
	// Stop, through the Go netpoller.
	ring *ringWait
	// detached is set by Stop once the programs are detached: what the
	// ring holds then is all there will be, and Run ends after reading it.
	detached atomic.Bool
	offCPU   bool
	// object is which sampler object is loaded: "default", or "compat"
	// on kernels without what bpf/lib/compat.h stands in for.
	object string
	// exit captures the mappings of processes as they exit
	// (bpf/exitmaps.bpf.c); nil when the kernel cannot run it.
	exit       *bpf.ExitMapsObjects
	filterPIDs bool

	events chan Event

	mu          sync.Mutex // guards links after start
	queueDrops  atomic.Uint64
	procDrops   atomic.Uint64
	decodeDrops atomic.Uint64
	closeOnce   sync.Once
	// readerMu orders Close's closing of the reader after a wait's
	// AvailableBytes, which the reader does not guard itself; readerClosed
	// is set under it.
	readerMu     sync.Mutex
	readerClosed bool
	// batch is one read of the ring, decoded (drain), and lastProc the
	// index in it of each pid's last process event.
	batch    []Event
	lastProc map[uint32]int
	// held are samples of an exec's new image waiting for its event, by
	// pid, and execMM the mm of each pid's last exec handed on (order).
	held   map[uint32][]*Record
	execMM map[uint32]uint32
}

// New loads and attaches the programs. It returns user-facing errors for
// missing privileges and kernel features.
func New(opts Options) (*Sampler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Frequency <= 0 {
		return nil, fmt.Errorf("frequency must be positive, got %d", opts.Frequency)
	}
	if opts.Queue <= 0 {
		opts.Queue = 65536
	}
	if opts.Clock == nil {
		opts.Clock = clock.NewConverter()
	}
	if err := opts.OffCPU.validate(); err != nil {
		return nil, err
	}
	// Bad options are refused before privileges are checked, so that
	// they are told apart from a missing capability.
	if w := opts.NewProcessWindow; w > WindowMax || w%8 != 0 {
		return nil, fmt.Errorf("new-process stack window of %d bytes: want a multiple of 8 up to %d", w, WindowMax)
	}
	if n := opts.RingBytes; n != 0 && (n < 2<<20 || n&(n-1) != 0) {
		return nil, fmt.Errorf("ring buffer of %d bytes: want a power of two of at least 2 MiB", n)
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	_ = rlimit.RemoveMemlock() // only needed before 5.11; memcg accounting after
	kf, err := checkFeatures()
	if err != nil {
		return nil, err
	}
	for _, d := range kf.degraded {
		opts.Logger.Warn(d)
	}
	load, object := bpf.LoadSampler, "default"
	if kf.compat || opts.compat {
		// bpf/lib/compat.h: the same programs and maps by name, so it
		// loads into the same objects.
		load, object = bpf.LoadSamplerCompat, "compat"
	}
	spec, err := load()
	if err != nil {
		return nil, fmt.Errorf("load sampler spec: %w", err)
	}
	if err := spec.Variables[bpf.SamplerVarSelfTgid].Set(uint32(os.Getpid())); err != nil {
		return nil, fmt.Errorf("set self_tgid: %w", err)
	}
	if w := opts.NewProcessWindow; w != 0 {
		if err := spec.Variables[bpf.SamplerVarNewProcessWindow].Set(w); err != nil {
			return nil, fmt.Errorf("set new_process_window: %w", err)
		}
	}
	if err := setOffCPUSpec(spec, opts.OffCPU); err != nil {
		return nil, err
	}
	if len(opts.PIDs) > 0 {
		if err := spec.Variables[bpf.SamplerVarFilterPids].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("set filter_pids: %w", err)
		}
	}
	if n := opts.RingBytes; n != 0 {
		spec.Maps[bpf.SamplerMapSamples].MaxEntries = uint32(n)
	}
	collOpts := &ebpf.CollectionOptions{}
	if err := ensureBPFFS(PinDir); err != nil {
		opts.Logger.Warn("task_trace_context is not pinned; other programs cannot fill it", "error", err)
		spec.Maps[bpf.SamplerMapTaskTraceContext].Pinning = ebpf.PinNone
	} else {
		collOpts.Maps.PinPath = PinDir
	}

	if m, err := useOTelMap(spec, collOpts, opts.OTelMapPin, opts.Logger); err != nil {
		return nil, err
	} else if m != nil {
		defer m.Close()
	}

	s := &Sampler{
		log:    opts.Logger,
		dec:    newDecoder(opts.Clock),
		exec:   opts.Exec,
		events: make(chan Event, opts.Queue),

		lastProc: map[uint32]int{},
		held:     map[uint32][]*Record{},
		execMM:   map[uint32]uint32{},

		filterPIDs: len(opts.PIDs) > 0,
	}
	switch mask, err := readPACMask(); {
	case err == nil:
		s.dec.pacMask = mask
		opts.Logger.Debug("pointer authentication", "mask", fmt.Sprintf("%#x", mask))
	case !errors.Is(err, errNoPAC):
		s.dec.pacUnknown = true
		opts.Logger.Warn("return addresses signed by pointer authentication keep their code: stacks through them end there (counted as pac_unstripped_frames)", "error", err)
	}
	err = loadSampler(spec, &s.objs, opts.OffCPU, collOpts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Something else is pinned at our path: run unpinned rather than
		// not at all, and say what to remove.
		opts.Logger.Warn("an incompatible map is pinned at "+PinDir+"/task_trace_context; running without the shared task-storage map (remove the pin to share it)", "error", err)
		spec.Maps[bpf.SamplerMapTaskTraceContext].Pinning = ebpf.PinNone
		err = loadSampler(spec, &s.objs, opts.OffCPU, collOpts)
	}
	if err != nil && opts.OffCPU.Enabled && !opts.OffCPU.RawTracepoint && strings.Contains(err.Error(), bpf.SamplerProgSchedSwitchBtf) {
		opts.Logger.Info("off-CPU: tp_btf/sched_switch does not load here, using the raw tracepoint", "error", err)
		opts.OffCPU.RawTracepoint = true
		err = loadSampler(spec, &s.objs, opts.OffCPU, collOpts)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load eBPF programs: verifier rejected them: %+v", ve)
		}
		return nil, fmt.Errorf("load eBPF programs: %w", err)
	}
	for _, pid := range opts.PIDs {
		if err := s.objs.Pids.Put(uint32(pid), uint8(1)); err != nil {
			s.Close()
			return nil, fmt.Errorf("add pid %d to filter: %w", pid, err)
		}
	}
	if err := s.attachTracepoints(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.loadExitMaps(); err != nil {
		opts.Logger.Warn("libraries and vDSO of processes gone before /proc could be read stay unplaced: their mappings are not captured at exit", "reason", err)
	} else if err := s.objs.ExecWakeup.Set(uint8(0)); err != nil {
		// Not fatal: each exec keeps waking the reader.
		opts.Logger.Warn("execs keep waking the ring reader", "error", err)
	}
	s.freq = opts.Frequency
	s.offCPU = opts.OffCPU.Enabled
	s.object = object
	s.reader, err = ringbuf.NewReader(s.objs.Samples)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	s.ring = newRingWait(s.objs.Samples.FD(), s.log)
	return s, nil
}

func (s *Sampler) attachTracepoints() error {
	exec, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OnExec})
	if err != nil {
		return fmt.Errorf("attach tp_btf/sched_process_exec: %w", err)
	}
	s.links = append(s.links, exec)
	exit, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OnExit})
	if err != nil {
		return fmt.Errorf("attach tp_btf/sched_process_exit: %w", err)
	}
	s.links = append(s.links, exit)
	fork, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OnFork})
	if err != nil {
		return fmt.Errorf("attach tp_btf/sched_process_fork: %w", err)
	}
	s.links = append(s.links, fork)
	return nil
}

// Start attaches the on-CPU program to the CPU clock of every online CPU,
// and the off-CPU program to sched_switch when enabled. New leaves them
// detached so that per-process configuration can be written before the
// first sample.
func (s *Sampler) Start() error {
	if s.offCPU {
		if err := s.attachOffCPU(); err != nil {
			return err
		}
	}
	freq := s.freq
	cpus, err := OnlineCPUs()
	if err != nil {
		return err
	}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafeSizeofPerfAttr),
			Sample: uint64(freq),
			Bits:   unix.PerfBitFreq,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open cpu-clock perf event on cpu %d: %w", cpu, err)
		}
		s.perf = append(s.perf, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: s.objs.SampleOnCpu, Attach: ebpf.AttachPerfEvent})
		if err == nil {
			s.mu.Lock()
			s.links = append(s.links, l)
			s.mu.Unlock()
			continue
		}
		// Kernels without perf-event bpf_link: attach by ioctl.
		if err2 := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, s.objs.SampleOnCpu.FD()); err2 != nil {
			return fmt.Errorf("attach perf_event program on cpu %d: %w (link: %v)", cpu, err2, err)
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enable perf event on cpu %d: %w", cpu, err)
		}
	}
	return nil
}

// ensureBPFFS makes sure dir lies on a mounted bpffs, mounting one at
// /sys/fs/bpf if nothing is mounted there.
func ensureBPFFS(dir string) error {
	root := filepath.Dir(dir)
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fmt.Errorf("stat %s: %w", root, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs at %s: %w", root, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	return nil
}

// Events delivers the samples and process events in the order the
// programs reserved them in the ring. It is closed when Run returns.
func (s *Sampler) Events() <-chan Event { return s.events }

// Object says which sampler object is loaded: "default", or "compat" on
// kernels without task storage for tracing programs,
// bpf_get_current_task_btf or bpf_task_pt_regs (bpf/lib/compat.h).
func (s *Sampler) Object() string { return s.object }

// TaskTraceContext is the task-storage map other programs can fill (a
// hash by thread id in the compat object).
func (s *Sampler) TaskTraceContext() *ebpf.Map { return s.objs.TaskTraceContext }

// Close releases everything. Run returns once the reader is closed.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() {
		s.Stop()
		if s.reader != nil {
			s.readerMu.Lock()
			s.readerClosed = true
			_ = s.reader.Close()
			s.readerMu.Unlock()
		}
		s.ring.close()
		for _, fd := range s.perf {
			_ = unix.Close(fd)
		}
		s.perf = nil
		if s.exit != nil {
			_ = s.exit.Close()
		}
		_ = s.objs.Close()
	})
	return nil
}

// SetProcConfig tells the programs where pid keeps its trace context.
func (s *Sampler) SetProcConfig(pid uint32, cfg bpf.SamplerProcConfig) error {
	return s.objs.ProcConfigs.Put(pid, cfg)
}

// SetStackWindow makes the programs copy bytes of pid's stack from the
// stack pointer with every sample (at most WindowMax; the first 1 KiB is
// copied for every process); 0 forgets pid's window, which goes back to
// Options.NewProcessWindow (for an exec's new image, or an exited
// process's pid).
func (s *Sampler) SetStackWindow(pid, bytes uint32) error {
	if bytes == 0 {
		err := s.objs.StackWindows.Delete(pid)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	return s.objs.StackWindows.Put(pid, min(bytes, WindowMax))
}

// SetExeWindow makes the programs copy bytes of stack (at most WindowMax)
// for the processes of the executable dev and ino name (the kernel's dev_t,
// major << 20 | minor, and inode, as ExecImage has them) until a process
// has a window of its own (SetStackWindow), in place of
// Options.NewProcessWindow: inExe for a sample whose ip is in the
// executable's own code, other for one elsewhere (its loader, its
// libraries); 0 keeps Options.NewProcessWindow for that kind. The kernel
// keeps the most recently used executables' windows; a file it dropped
// goes back to Options.NewProcessWindow.
func (s *Sampler) SetExeWindow(dev uint32, ino uint64, inExe, other uint32) error {
	return s.objs.ExeWindows.Put(bpf.SamplerExeKey{Ino: ino, Dev: dev},
		bpf.SamplerExeWindow{InExe: min(inExe, WindowMax), Other: min(other, WindowMax)})
}

// DeleteProcConfig forgets pid's configuration.
func (s *Sampler) DeleteProcConfig(pid uint32) error {
	err := s.objs.ProcConfigs.Delete(pid)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// AttachHook attaches the trace-context writer to the function at file
// offset off of the ELF file at path, for every process mapping it.
func (s *Sampler) AttachHook(path string, off uint64) error {
	return s.attachUprobe(path, "spanprof_set_trace_context", s.objs.SetTraceContext, off)
}

// AttachLoader attaches the link-map program to the dynamic loader's
// debugger hook, the function at file offset off of the loader at path
// (_dl_debug_state), for every process mapping that file: each of them
// then sends a ProcEvent with LinkMap set as it loads or unloads a
// library.
func (s *Sampler) AttachLoader(path string, off uint64) error {
	return s.attachUprobe(path, "_dl_debug_state", s.objs.OnLinkMap, off)
}

// attachUprobe attaches prog to the function sym at file offset off of
// the ELF file at path; the link lives until Close.
func (s *Sampler) attachUprobe(path, sym string, prog *ebpf.Program, off uint64) error {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	l, err := ex.Uprobe(sym, prog, &link.UprobeOptions{Address: off})
	if err != nil {
		return fmt.Errorf("attach uprobe to %s: %w", path, err)
	}
	s.mu.Lock()
	s.links = append(s.links, l)
	s.mu.Unlock()
	return nil
}

// PACMask returns the pointer-authentication bits the decoder clears from
// user return addresses (arm64; 0 elsewhere or where they are unknown).
func (s *Sampler) PACMask() uint64 { return s.dec.pacMask }
