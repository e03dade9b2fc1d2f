package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// profiler is one configuration run against the workloads.
type profiler struct {
	name  string
	args  func(tmp string) []string // nil: no profiler (baseline)
	ready string                    // output that says it is attached; "" waits settle
	stop  syscall.Signal
	// spanprof reports its own sample count ("wrote N samples").
	spanprof bool
}

const settle = 1500 * time.Millisecond

// profilers lists the configurations of the slowdown phase. reference,
// if set, is another spanprof build measured in the same rounds, for a
// before/after comparison that shares the machine's noise.
func profilers(bin, reference string) []profiler {
	profs := []profiler{
		{name: "baseline"},
		{name: "perf record -g", stop: syscall.SIGTERM, args: func(tmp string) []string {
			return []string{"perf", "record", "-F", "999", "-g", "-a", "-q", "-o", filepath.Join(tmp, "perf.data")}
		}},
		{name: "spanprof", ready: "spanprof: recording", stop: syscall.SIGTERM, spanprof: true, args: func(tmp string) []string {
			return []string{bin, "record", "--all", "--frequency", "999", "--duration", "1h", "--output", filepath.Join(tmp, "spanprof.pb.gz")}
		}},
		{name: "spanprof --off-cpu", ready: "spanprof: recording", stop: syscall.SIGTERM, spanprof: true, args: func(tmp string) []string {
			return []string{bin, "record", "--all", "--frequency", "999", "--off-cpu", "--duration", "1h", "--output", filepath.Join(tmp, "spanprof-off.pb.gz")}
		}},
		// bpftrace prints (and symbolizes) its whole map on SIGTERM, which
		// takes tens of seconds and is no part of the measurement.
		{name: "bpftrace", ready: "Attaching", stop: syscall.SIGKILL, args: func(string) []string {
			return []string{"bpftrace", "-e", "profile:hz:999 { @[kstack, ustack] = count(); }"}
		}},
		// The floor every tick-driven sampler pays here: the same 999 Hz
		// CPU-clock events on every CPU, each running an eBPF program that
		// does nothing. What a sampler adds above it is its own work.
		{name: "timer floor", ready: "Attaching", stop: syscall.SIGKILL, args: func(string) []string {
			return []string{"bpftrace", "-e", "profile:hz:999 { }"}
		}},
		// offcputime's stdout is a pipe, so its banner stays buffered.
		{name: "offcputime", stop: syscall.SIGKILL, args: func(string) []string {
			return []string{offcputimePath, "3600"}
		}},
	}
	if reference != "" {
		profs = append(profs, profiler{name: "spanprof (reference build)", ready: "spanprof: recording", stop: syscall.SIGTERM, spanprof: true,
			args: func(tmp string) []string {
				return []string{reference, "record", "--all", "--frequency", "999", "--duration", "1h", "--output", filepath.Join(tmp, "reference.pb.gz")}
			}})
	}
	return profs
}

var offcputimePath = "/usr/sbin/offcputime"

// launch starts prof and waits until it is attached.
func launch(prof profiler, tmp string) (*proc, error) {
	if prof.args == nil {
		return nil, nil
	}
	a := prof.args(tmp)
	p, err := start(a[0], a[1:]...)
	if err != nil {
		return nil, err
	}
	if prof.ready != "" {
		if err := p.waitFor(prof.ready, 60*time.Second); err != nil {
			p.kill()
			return nil, fmt.Errorf("%s: %w", prof.name, err)
		}
	}
	time.Sleep(settle) // perf has no ready line; all get the same settle
	return p, nil
}
