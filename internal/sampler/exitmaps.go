package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/spanprof/spanprof/bpf"
)

// exitCounterNames names the exit-capture counters (enum exit_counter).
// None of them is a lost sample: they count mappings that may leave frames
// of exited processes unnamed.
var exitCounterNames = map[bpf.ExitMapsExitCounter]string{
	bpf.ExitMapsExitCounterEXIT_CNT_MISSED:       "exit_maps_missed",
	bpf.ExitMapsExitCounterEXIT_CNT_VMAS_DROPPED: "exit_vmas_dropped",
	bpf.ExitMapsExitCounterEXIT_CNT_UNTRACKED:    "exit_maps_untracked",
}

// loadExitMaps loads and attaches the programs that capture the executable
// mappings of processes as they exit (bpf/exitmaps.bpf.c), sharing the
// sampler's ring and pid filter. They are optional: on a kernel that cannot
// run them the sampler works as before, and the returned error says what
// is missing.
func (s *Sampler) loadExitMaps() error {
	spec, err := bpf.LoadExitMaps()
	if err != nil {
		return fmt.Errorf("load exit-maps spec: %w", err)
	}
	return s.loadExitMapsSpec(spec)
}

func (s *Sampler) loadExitMapsSpec(spec *ebpf.CollectionSpec) error {
	if err := spec.Variables[bpf.ExitMapsVarSelfTgid].Set(uint32(os.Getpid())); err != nil {
		return fmt.Errorf("set self_tgid: %w", err)
	}
	if s.filterPIDs {
		if err := spec.Variables[bpf.ExitMapsVarFilterPids].Set(uint8(1)); err != nil {
			return fmt.Errorf("set filter_pids: %w", err)
		}
	}
	// The replacements must match the maps they stand for.
	spec.Maps[bpf.ExitMapsMapSamples].MaxEntries = s.objs.Samples.MaxEntries()
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		bpf.ExitMapsMapSamples: s.objs.Samples,
		bpf.ExitMapsMapPids:    s.objs.Pids,
	}}
	var objs bpf.ExitMapsObjects
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		if !kernelHas("bpf_iter_task_vma_new") {
			return errors.New("the kernel has no VMA iterator (bpf_iter_task_vma, Linux 6.7)")
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("verifier rejected the exit-maps programs: %+v", ve)
		}
		return fmt.Errorf("load exit-maps programs: %w", err)
	}
	links, err := attachExitMaps(&objs, s.log)
	if err != nil {
		objs.Close()
		return err
	}
	s.exit = &objs
	s.mu.Lock()
	s.links = append(s.links, links...)
	s.mu.Unlock()
	return nil
}

// attachExitMaps attaches the captures before the flags, so no flagged
// process exits unseen. exit_group is the capture every kernel with the
// iterator supports; sched_process_exit adds the other exits where the mm
// is still there (6.16 on), and either one alone is enough to run.
func attachExitMaps(objs *bpf.ExitMapsObjects, log *slog.Logger) ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		return nil, err
	}
	mounted, errTracefs := EnsureTracefs()
	if mounted {
		log.Info("mounted tracefs at " + tracefsPath + " for the exit_group tracepoint")
	}
	group, errGroup := link.Tracepoint("syscalls", "sys_enter_exit_group", objs.CaptureExitGroup, nil)
	if errGroup != nil && errTracefs != nil {
		errGroup = fmt.Errorf("%w (%v)", errGroup, errTracefs)
	}
	if errGroup == nil {
		links = append(links, group)
	}
	exit, errExit := link.AttachTracing(link.TracingOptions{Program: objs.CaptureExit})
	if errExit == nil {
		links = append(links, exit)
	}
	if len(links) == 0 {
		return fail(fmt.Errorf("attach syscalls/sys_enter_exit_group: %w; tp_btf/sched_process_exit: %v", errGroup, errExit))
	}
	switch {
	case errGroup == nil:
	case exitSeesMM():
		// Nothing is lost: this kernel's sched_process_exit sees every
		// exit with its mm.
		log.Info("mappings are captured at sched_process_exit only, which sees every exit on this kernel", "reason", fmt.Errorf("attach syscalls/sys_enter_exit_group: %w", errGroup))
	default:
		log.Warn("mappings are captured at sched_process_exit only, which this kernel (before 6.16) traces after the mm is gone (those exits count as exit_maps_missed)",
			"reason", fmt.Errorf("attach syscalls/sys_enter_exit_group: %w", errGroup))
	}
	log.Debug("exit mappings capture attached", "exit_group", errGroup == nil, "sched_process_exit", errExit == nil)
	for _, p := range []*ebpf.Program{objs.FlagExec, objs.FlagFork} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fail(fmt.Errorf("attach %s: %w", p, err))
		}
		links = append(links, l)
	}
	return links, nil
}

// kernelHas reports whether the kernel's BTF names the function.
func kernelHas(fn string) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return true // unknown: let the load error speak
	}
	var f *btf.Func
	return spec.TypeByName(fn, &f) == nil
}

// exitCounters adds the exit-capture counters to out.
func (s *Sampler) exitCounters(out map[string]uint64) error {
	if s.exit == nil {
		return nil
	}
	for idx, name := range exitCounterNames {
		var perCPU []uint64
		if err := s.exit.ExitCounters.Lookup(uint32(idx), &perCPU); err != nil {
			return fmt.Errorf("read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		out[name] = sum
	}
	return nil
}
