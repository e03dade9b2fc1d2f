package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
)

// slowRow is one (round, profiler) measurement of the workload phase.
type slowRow struct {
	round, order int
	prof         string
	chainNs      float64 // mean elapsed_ns of the chain instances
	pingNs       float64 // ns per pingpong round trip
	sample       progStat
	switches     progStat
	cpuWindow    time.Duration // profiler CPU while the workloads ran
	cpuTotal     time.Duration // including start-up and writing the output
	hwmKiB       int64
	samples      int64 // spanprof: samples written
	window       time.Duration
}

// runChain runs n chain-clang instances in fixed mode at once and
// returns their mean elapsed_ns.
func runChain(chain string, n, calls int) (float64, error) {
	var wg sync.WaitGroup
	res := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := start(chain, strconv.Itoa(calls), os.DevNull, "fixed")
			if err != nil {
				errs[i] = err
				return
			}
			if err := p.wait(10 * time.Minute); err != nil {
				errs[i] = err
				return
			}
			res[i], errs[i] = field(p.out.String(), "elapsed_ns")
		}()
	}
	wg.Wait()
	var sum float64
	for i := range n {
		if errs[i] != nil {
			return 0, errs[i]
		}
		sum += float64(res[i])
	}
	return sum / float64(n), nil
}

// runPingpong runs the pipe ping-pong for secs and returns ns per round
// trip (two context switches per thread per round).
func runPingpong(pingpong string, secs int) (float64, error) {
	p, err := start(pingpong, strconv.Itoa(secs))
	if err != nil {
		return 0, err
	}
	if err := p.wait(time.Duration(secs+60) * time.Second); err != nil {
		return 0, err
	}
	rounds, err := field(p.out.String(), "rounds")
	if err != nil || rounds == 0 {
		return 0, fmt.Errorf("pingpong: %v", err)
	}
	return float64(secs) * 1e9 / float64(rounds), nil
}

// measureSlowdown runs the workloads once under prof.
func (b *bench) measureSlowdown(prof profiler, round, order int) (slowRow, error) {
	row := slowRow{round: round, order: order, prof: prof.name}
	tmp, err := os.MkdirTemp(b.tmp, "slow")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(tmp)
	p, err := launch(prof, tmp)
	if err != nil {
		return row, err
	}
	var ids map[ebpf.ProgramID]progKind
	var cpu0 time.Duration
	if p != nil {
		ids = progIDs(p.pid())
		cpu0, _ = cpuNow(p.pid())
	}
	t0 := time.Now()
	s0 := readStats(ids, kindSample)
	row.chainNs, err = runChain(b.chain, b.instances, b.calls)
	s1 := readStats(ids, kindSample)
	if err == nil {
		w0 := readStats(ids, kindSwitch)
		row.pingNs, err = runPingpong(b.pingpong, b.pingSecs)
		row.switches = readStats(ids, kindSwitch).sub(w0)
	}
	row.sample = s1.sub(s0)
	row.window = time.Since(t0)
	if p == nil {
		return row, err
	}
	cpu1, _ := cpuNow(p.pid())
	row.cpuWindow = cpu1 - cpu0
	row.hwmKiB = statusKiB(p.pid(), "VmHWM")
	p.stop(prof.stop, 60*time.Second)
	row.cpuTotal, _ = p.rusage()
	if prof.spanprof {
		row.samples, _ = field(p.out.String(), "spanprof: wrote")
	}
	return row, err
}
