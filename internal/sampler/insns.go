package sampler

import (
	"fmt"
	"maps"
	"reflect"

	"github.com/cilium/ebpf"
)

// VerifiedInstructions returns, for each program the sampler loaded (its
// own and the exit-maps capture's), by name, how many instructions the
// verifier processed to accept it: the cost that grows when a change
// makes the verifier walk more paths, and that a kernel's limit (one
// million) bounds. ok is false when the kernel does not report it
// (before Linux 5.16).
func (s *Sampler) VerifiedInstructions() (counts map[string]uint32, ok bool, err error) {
	counts = map[string]uint32{}
	ok = true
	add := func(progs any) error {
		v := reflect.ValueOf(progs).Elem()
		for i := range v.NumField() {
			p, isProg := v.Field(i).Interface().(*ebpf.Program)
			if !isProg || p == nil {
				continue
			}
			name := v.Type().Field(i).Tag.Get("ebpf")
			info, err := p.Info()
			if err != nil {
				return fmt.Errorf("program %s: %w", name, err)
			}
			n, has := info.VerifiedInstructions()
			if !has {
				ok = false
				continue
			}
			counts[name] = n
		}
		return nil
	}
	if err := add(&s.objs.SamplerPrograms); err != nil {
		return nil, false, err
	}
	if s.exit != nil {
		if err := add(&s.exit.ExitMapsPrograms); err != nil {
			return nil, false, err
		}
	}
	return counts, ok, nil
}

// MeasureVerifiedInstructions loads the sampler's programs for pid, off-CPU
// sampling on, once for each sched_switch variant (a sampler loads only
// the one it attaches), and returns every program's count as
// VerifiedInstructions does: the kernel matrix's insns step and the
// host's budget test.
func MeasureVerifiedInstructions(pid int) (counts map[string]uint32, ok bool, err error) {
	counts = map[string]uint32{}
	ok = true
	for _, raw := range []bool{false, true} {
		s, err := New(Options{Frequency: 99, PIDs: []int{pid}, OffCPU: OffCPUOptions{Enabled: true, RawTracepoint: raw}})
		if err != nil {
			return nil, false, err
		}
		c, reported, err := s.VerifiedInstructions()
		s.Close()
		if err != nil {
			return nil, false, err
		}
		ok = ok && reported
		maps.Copy(counts, c)
	}
	return counts, ok, nil
}
