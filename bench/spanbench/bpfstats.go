package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// progKind sorts a profiler's programs by what they run on.
type progKind int

const (
	kindOther  progKind = iota
	kindSample          // perf_event: one run per CPU-clock tick
	kindSwitch          // sched_switch: one run per context switch
)

// progStat is run time and count summed over a set of programs.
type progStat struct {
	runtime time.Duration
	runs    uint64
}

func (a progStat) sub(b progStat) progStat {
	return progStat{a.runtime - b.runtime, a.runs - b.runs}
}

// nsPerRun is the mean eBPF time per run, or 0 without runs.
func (s progStat) nsPerRun() float64 {
	if s.runs == 0 {
		return 0
	}
	return float64(s.runtime.Nanoseconds()) / float64(s.runs)
}

// progIDs lists the eBPF programs pid holds (prog and link fds both show
// "prog_id:" in fdinfo), so that concurrent spanprof instances of other
// users of the machine are never mixed in.
func progIDs(pid int) map[ebpf.ProgramID]progKind {
	ids := map[ebpf.ProgramID]progKind{}
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			v, ok := strings.CutPrefix(sc.Text(), "prog_id:")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				continue
			}
			id := ebpf.ProgramID(n)
			if _, seen := ids[id]; !seen {
				ids[id] = classify(id)
			}
		}
		fh.Close()
	}
	return ids
}

func classify(id ebpf.ProgramID) progKind {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return kindOther
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return kindOther
	}
	switch {
	case info.Type == ebpf.PerfEvent:
		return kindSample
	case strings.Contains(info.Name, "switch"):
		return kindSwitch
	}
	return kindOther
}

// eachProg calls f with each program of kind k still loaded, open for
// the call.
func eachProg(ids map[ebpf.ProgramID]progKind, k progKind, f func(*ebpf.Program)) {
	for id, kind := range ids {
		if kind != k {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		f(p)
		p.Close()
	}
}

// readStats sums run time and count of the programs of kind k.
func readStats(ids map[ebpf.ProgramID]progKind, k progKind) progStat {
	var s progStat
	eachProg(ids, k, func(p *ebpf.Program) {
		if st, err := p.Stats(); err == nil {
			s.runtime += st.Runtime
			s.runs += st.RunCount
		}
	})
	return s
}

// enableBPFStats turns eBPF run-time stats on and returns a restore. It
// holds a BPF_ENABLE_STATS reference of its own (Linux 5.8): stats stay on
// for as long as this bench runs even when another bench on the machine,
// ending, writes kernel.bpf_stats_enabled back to 0 (the sysctl is one
// shared switch). The sysctl is the fallback on older kernels.
func enableBPFStats() (func(), error) {
	if c, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
		return func() { _ = c.Close() }, nil
	}
	const path = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enable bpf stats: %w", err)
	}
	return func() { _ = os.WriteFile(path, old, 0o644) }, nil
}
