package truth

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OffCPUSpan is one span of testdata/offcpu/spans with the time it blocked.
type OffCPUSpan struct {
	TID         int
	Trace, Span string
	Kind        string
	Blocked     int64
	Function    string
	// Preempted counts the thread's involuntary context switches in the
	// span's blocking calls: time it then waited for a CPU is in Blocked
	// but is not a wait a profiler of blocked time reports.
	Preempted int
}

// ReadOffCPU reads the spans fixture's ground truth, by "trace/span".
func ReadOffCPU(path string) (map[string]OffCPUSpan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]OffCPUSpan{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p := strings.Fields(line)
		if len(p) != 9 {
			return nil, fmt.Errorf("bad truth line %q", line)
		}
		tid, _ := strconv.Atoi(p[0])
		blocked, _ := strconv.ParseInt(p[6], 10, 64)
		preempted, err := strconv.Atoi(p[8])
		if err != nil {
			return nil, fmt.Errorf("bad truth line %q: %w", line, err)
		}
		out[p[1]+"/"+p[2]] = OffCPUSpan{tid, p[1], p[2], p[5], blocked, p[7], preempted}
	}
	return out, nil
}

// WantReasons are the kernel wait functions of each kind of span; the futex
// and pipe ones were renamed across kernel versions (6.18: futex_do_wait,
// anon_pipe_read; before 6.2: futex_wait_queue_me).
var WantReasons = map[string][]string{
	"sleep":    {"do_nanosleep"},
	"usleep":   {"do_nanosleep"}, // through glibc's usleep, nanosleep, clock_nanosleep
	"futex":    {"futex_wait_queue", "futex_do_wait", "futex_wait_queue_me"},
	"pipe":     {"pipe_read", "anon_pipe_read"},
	"pingpong": {"pipe_read", "anon_pipe_read"},
}

// uninterruptibleWaits are the kernel functions that put a blocked thread
// in state D rather than S: a write to a pipe whose mutex the other end
// holds waits in __mutex_lock, uninterruptibly, before it reaches
// pipe_write's interruptible wait.
var uninterruptibleWaits = []string{"__mutex_lock", "mutex_lock", "rwsem_down_", "io_schedule"}

// StateFitsStack reports whether an off-CPU sample's thread.state is the
// one its kernel stack implies: S for the fixture's interruptible waits,
// D only where the stack waits in one of uninterruptibleWaits.
func StateFitsStack(state string, frames []string) bool {
	switch state {
	case "S":
		return true
	case "D":
		for _, f := range frames {
			for _, w := range uninterruptibleWaits {
				if strings.HasPrefix(f, w) {
					return true
				}
			}
		}
	}
	return false
}

// OffCPUKind tallies one kind of span, in nanoseconds.
type OffCPUKind struct {
	Truth, Attributed            int64
	ReasonRight, FunctionOnStack int64
	// Spans and Preempted count the kind's spans and those whose thread
	// was preempted in a blocking call; the Unpreempted sums are Truth and
	// Attributed over the others, whose truth is only the waits.
	Spans, Preempted                        int
	TruthUnpreempted, AttributedUnpreempted int64
}

// OffCPU is the off-CPU time spanprof attributed to the fixture's spans.
type OffCPU struct {
	Kinds                 map[string]*OffCPUKind
	Truth, Attributed     int64
	Events                int
	WrongLink, WrongState int
	// WrongStates describes the first five samples of WrongState: each
	// one's state, kind of span, off-CPU time and stack.
	WrongStates []string
}

// Error is the attributed time's relative error against the real one.
func (o OffCPU) Error() float64 { return float64(o.Attributed)/float64(o.Truth) - 1 }

// MeasureOffCPU adds up the off-CPU samples linked to the spans of truth.
func MeasureOffCPU(truth map[string]OffCPUSpan, samples []Sample) OffCPU {
	o := OffCPU{Kinds: map[string]*OffCPUKind{}}
	for _, s := range truth {
		if o.Kinds[s.Kind] == nil {
			o.Kinds[s.Kind] = &OffCPUKind{}
		}
		k := o.Kinds[s.Kind]
		k.Truth += s.Blocked
		k.Spans++
		if s.Preempted > 0 {
			k.Preempted++
		} else {
			k.TruthUnpreempted += s.Blocked
		}
		o.Truth += s.Blocked
	}
	for _, s := range samples {
		if s.Kind != "off_cpu" || s.Trace == "" {
			continue
		}
		var v int64
		for _, x := range s.Values {
			v += x
		}
		o.Events += len(s.Values)
		sp, ok := truth[s.Trace+"/"+s.Span]
		if !ok || strconv.Itoa(sp.TID) != s.Attrs["thread.id"] {
			o.WrongLink++
			continue
		}
		if !StateFitsStack(s.Attrs["thread.state"], s.Frames) {
			o.WrongState++
			if len(o.WrongStates) < 5 {
				o.WrongStates = append(o.WrongStates, fmt.Sprintf("state %q in a %s span, %d µs, frames %v",
					s.Attrs["thread.state"], sp.Kind, v/1000, s.Frames))
			}
		}
		k := o.Kinds[sp.Kind]
		k.Attributed += v
		if sp.Preempted == 0 {
			k.AttributedUnpreempted += v
		}
		o.Attributed += v
		for _, r := range WantReasons[sp.Kind] {
			if s.Attrs["off_cpu.reason"] == r && ContainsFrame(s.Frames, r) {
				k.ReasonRight += v
			}
		}
		if ContainsFrame(s.Frames, sp.Function) {
			k.FunctionOnStack += v
		}
	}
	return o
}
