package sampler

import (
	"fmt"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"golang.org/x/sys/unix"
)

var unsafeSizeofPerfAttr = unsafe.Sizeof(unix.PerfEventAttr{})

// counterNames names the kernel counters in the order of enum drop_counter.
var counterNames = map[bpf.SamplerDropCounter]string{
	bpf.SamplerDropCounterCNT_SAMPLES:             "samples",
	bpf.SamplerDropCounterCNT_RINGBUF_FULL:        "lost_ringbuf_full",
	bpf.SamplerDropCounterCNT_USTACK_ERR:          "user_stack_error",
	bpf.SamplerDropCounterCNT_KSTACK_ERR:          "kernel_stack_error",
	bpf.SamplerDropCounterCNT_STACK_TOP_ERR:       "stack_top_read_error",
	bpf.SamplerDropCounterCNT_CTX_READ_ERR:        "context_read_error",
	bpf.SamplerDropCounterCNT_PROC_EVENTS_LOST:    "lost_proc_events",
	bpf.SamplerDropCounterCNT_CTX_INVALID:         "context_invalid",
	bpf.SamplerDropCounterCNT_GO_LABELS_ERR:       "go_labels_error",
	bpf.SamplerDropCounterCNT_CTX_ATTRS_ERR:       "context_attrs_read_error",
	bpf.SamplerDropCounterCNT_NODE_CTX_ERR:        "node_context_walk_error",
	bpf.SamplerDropCounterCNT_OFFCPU_SAMPLES:      "offcpu_samples",
	bpf.SamplerDropCounterCNT_OFFCPU_PENDING_FULL: "lost_offcpu_pending_full",
	bpf.SamplerDropCounterCNT_OFFCPU_STATE_ERR:    "lost_offcpu_no_state",
	bpf.SamplerDropCounterCNT_TASK_HASH_FULL:      "task_hash_full",
}

// Counters returns the kernel counters summed over CPUs and the user-space
// drops, by name. Names starting with "lost_" are samples that never
// reached the profile, or process events (lost_proc_events*) that never
// reached the tracker; lost_decode counts every record that did not decode.
func (s *Sampler) Counters() (map[string]uint64, error) {
	out := map[string]uint64{
		"lost_queue_full": s.queueDrops.Load(),
		"lost_decode":     s.decodeDrops.Load(),
		// User return addresses left signed: the machine signs them and
		// the mask could not be read (readPACMask).
		"pac_unstripped_frames": s.dec.pacUnstripped.Load(),
		// Not samples, but named as the kernel's lost_proc_events: execs
		// and exits the consumer never saw, whose processes' samples may
		// then be placed in the image before.
		"lost_proc_events_queue_full": s.procDrops.Load(),
	}
	for idx, name := range counterNames {
		var perCPU []uint64
		if err := s.objs.Counters.Lookup(uint32(idx), &perCPU); err != nil {
			return out, fmt.Errorf("read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		out[name] = sum
	}
	return out, s.exitCounters(out)
}
