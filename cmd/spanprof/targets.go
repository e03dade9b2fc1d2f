package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// resolveTargets checks every --pid before anything is loaded
// (pipeline.ResolvePIDs), saying on stderr which thread ids stand for
// their process.
func resolveTargets(procRoot string, ids []int, stderr io.Writer) ([]int, error) {
	return pipeline.ResolvePIDs(procRoot, ids, func(id, pid int, comm string) {
		fmt.Fprintf(stderr, "spanprof: %d is a thread of process %d (%s): recording the process\n", id, pid, comm)
	})
}

// cpuUse is what /proc says of a target at one moment.
type cpuUse struct {
	name string
	cpu  time.Duration
	ok   bool // false once the process is gone
}

// cpuTimes reads the CPU time of each target, to tell whether an empty
// recording means idle targets.
func cpuTimes(pids []int) map[int]cpuUse {
	m := map[int]cpuUse{}
	for _, pid := range pids {
		comm, t, ok := pipeline.ProcessCPU("/proc", pid)
		m[pid] = cpuUse{name: comm, cpu: time.Duration(t) * time.Second / clockTicks, ok: ok}
	}
	return m
}

// nothingRecorded is the error of a recording without a sample, with the
// reason as far as it can be told from the targets' CPU time before and
// after.
func nothingRecorded(pids []int, before, after map[int]cpuUse, took time.Duration, offCPU bool, lost uint64) error {
	took = took.Round(100 * time.Millisecond)
	if lost > 0 {
		return fmt.Errorf("nothing recorded in %v: all %d samples were lost (see the counters above)", took, lost)
	}
	if len(pids) == 0 {
		return fmt.Errorf("nothing recorded in %v: no process ran on a CPU while sampling", took)
	}
	var idle, ran []string
	for _, pid := range pids {
		b, a := before[pid], after[pid]
		name := fmt.Sprintf("%d (%s)", pid, b.name)
		switch {
		case !b.ok || !a.ok:
			ran = append(ran, name+" exited before its CPU time could be read")
		case a.cpu == b.cpu:
			idle = append(idle, name)
		default:
			ran = append(ran, fmt.Sprintf("%s used %v of CPU", name, (a.cpu-b.cpu).Round(time.Millisecond)))
		}
	}
	if len(ran) == 0 {
		hint := " (--off-cpu records where it waits)"
		if offCPU {
			hint = " and did not switch out"
		}
		return fmt.Errorf("nothing recorded in %v: pid %s used no CPU time%s", took, strings.Join(idle, ", "), hint)
	}
	return fmt.Errorf("nothing recorded in %v although %s; no sample was lost in the kernel", took, strings.Join(ran, ", "))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture spanprof runs on.
const clockTicks = 100

// isTerminal tells whether w is a terminal, where progress is shown; a
// pipe or file gets none (it would fill logs with carriage returns).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// progress rewrites one status line on a terminal: samples so far and
// the time left (the time so far when recording until a command exits).
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	total time.Duration
}

func (p *progress) show(samples int) {
	if !p.on {
		return
	}
	if p.total == 0 { // until a command exits
		fmt.Fprintf(p.w, "\r\033[Kspanprof: %d %s, %v so far", samples, plural(samples, "sample", "samples"), time.Since(p.start).Round(time.Second))
		return
	}
	left := max(0, p.total-time.Since(p.start)).Round(time.Second)
	fmt.Fprintf(p.w, "\r\033[Kspanprof: %d %s, %v left", samples, plural(samples, "sample", "samples"), left)
}

// clear erases the status line before other output.
func (p *progress) clear() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
