package main

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
)

// costRow is one profiler run of the scale and growth phases.
type costRow struct {
	round      int
	label      string
	freq       int
	procs      int
	threads    int
	window     time.Duration
	cpuWindow  time.Duration
	cpuTotal   time.Duration
	hwmKiB     int64
	samples    int64
	sample     progStat
	switches   progStat
	profileOut string // perf report of the agent, when taken
	noBar      bool   // measured for context: no bar of SPEC applies
	// bin is the spanprof binary run (empty: -spanprof), warmup how long
	// it runs before the window (zero: settle), and execRate the
	// processes a second the workload starts (churn: CPU per exec).
	bin      string
	warmup   time.Duration
	execRate int
	// forks is how many processes the whole machine started in the
	// window (/proc/stat "processes"): under --all on a shared machine
	// the agent handles others' new processes too.
	forks int64
}

// distinctCopies writes n copies of bin into dir as fanout-<i>, each with
// its own GNU build ID, so a profiler sees n distinct executables.
func distinctCopies(bin, dir string, n int) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	sec := f.Section(".note.gnu.build-id")
	f.Close()
	if sec == nil {
		return fmt.Errorf("%s has no build ID", bin)
	}
	// Note header (namesz, descsz, type) and "GNU\0", then the ID; the
	// last 4 bytes of the ID become the copy's index.
	end := int(sec.Offset) + 16 + 20
	for i := range n {
		binary.LittleEndian.PutUint32(data[end-4:end], uint32(i)^0x5eed0000)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("fanout-%d", i)), data, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// startFanout starts nproc processes of nthreads threads (distinct
// binaries) for secs and returns the parent and the children's pids.
func (b *bench) startFanout(nproc, nthreads, secs int) (*proc, []int, error) {
	dir := filepath.Join(b.tmp, "fanout-bins")
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("fanout-%d", nproc-1))); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		if err := distinctCopies(b.fanout, dir, max(nproc, 200)); err != nil {
			return nil, nil, err
		}
	}
	return b.runFanout(nproc, nthreads, secs, dir)
}

// runFanout starts the fanout binary (its children run the copies in dir,
// or fork it when dir is "") and returns the parent and the children's
// pids once they are ready.
func (b *bench) runFanout(nproc, nthreads, secs int, dir string) (*proc, []int, error) {
	args := []string{strconv.Itoa(nproc), strconv.Itoa(nthreads), strconv.Itoa(secs), "100", "500"}
	if dir != "" {
		args = append(args, dir)
	}
	p, err := start(b.fanout, args...)
	if err != nil {
		return nil, nil, err
	}
	pids, err := children(p)
	if err != nil {
		p.kill()
		return nil, nil, err
	}
	return p, pids, nil
}

// startBusy starts n chain-clang processes busy 80 % of the time for secs.
func (b *bench) startBusy(n, secs int) ([]*proc, []int, error) {
	var ps []*proc
	var pids []int
	for range n {
		p, err := start(b.chain, strconv.Itoa(secs*1000), os.DevNull, "cpu")
		if err != nil {
			return ps, pids, err
		}
		ps = append(ps, p)
		pids = append(pids, p.pid())
	}
	return ps, pids, nil
}

func pidArgs(pids []int) []string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return []string{"--pid", strings.Join(s, ",")}
}

var agentStopRe = regexp.MustCompile(`msg="agent stopped" samples_collected=(\d+)`)

// measureSpanprof runs spanprof (args after the binary) for secs while the
// workload runs, and measures its CPU, peak RSS, samples and eBPF time.
// With perfFreq > 0 it also records the process with perf and keeps the
// top of the report.
func (b *bench) measureSpanprof(row costRow, args []string, ready string, secs int, perfFreq int) (costRow, error) {
	bin := b.spanprof
	if row.bin != "" {
		bin = row.bin
	}
	p, err := start(bin, args...)
	if err != nil {
		return row, err
	}
	if err := p.waitFor(ready, time.Minute); err != nil {
		p.kill()
		return row, err
	}
	time.Sleep(max(settle, row.warmup))
	ids := progIDs(p.pid())
	cpu0, _ := cpuNow(p.pid())
	f0 := forksNow()
	s0, w0 := readStats(ids, kindSample), readStats(ids, kindSwitch)
	var perf *proc
	perfData := filepath.Join(b.tmp, fmt.Sprintf("agent-%d.perf.data", time.Now().UnixNano()))
	if perfFreq > 0 {
		perf, err = start("perf", "record", "-F", strconv.Itoa(perfFreq), "-g", "-q", "-p", strconv.Itoa(p.pid()), "-o", perfData)
		if err != nil {
			p.kill()
			return row, err
		}
	}
	t0 := time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	row.window = time.Since(t0)
	cpu1, _ := cpuNow(p.pid())
	row.forks = forksNow() - f0
	row.sample = readStats(ids, kindSample).sub(s0)
	row.switches = readStats(ids, kindSwitch).sub(w0)
	row.cpuWindow = cpu1 - cpu0
	row.hwmKiB = statusKiB(p.pid(), "VmHWM")
	if perf != nil {
		perf.stop(syscall.SIGTERM, 30*time.Second)
	}
	p.stop(syscall.SIGTERM, time.Minute)
	row.cpuTotal, _ = p.rusage()
	out := p.out.String()
	if m := agentStopRe.FindStringSubmatch(out); m != nil {
		row.samples, _ = strconv.ParseInt(m[1], 10, 64)
	} else if n, err := field(out, "spanprof: wrote"); err == nil {
		row.samples = n
	}
	if perf != nil {
		row.profileOut = perfReport(perfData)
		os.Remove(perfData)
	}
	return row, nil
}

// perfReport is the top of perf's flat and cumulative reports.
func perfReport(data string) string {
	var sb strings.Builder
	for _, mode := range []string{"--no-children", "--children"} {
		p, err := start("perf", "report", "-i", data, "--stdio", mode, "--sort", "symbol", "-g", "none", "--percent-limit", "1")
		if err != nil {
			return err.Error()
		}
		_ = p.wait(5 * time.Minute)
		fmt.Fprintf(&sb, "perf report %s --sort symbol (>= 1 %%):\n", mode)
		n := 0
		for _, line := range strings.Split(p.out.String(), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			sb.WriteString(line + "\n")
			if n++; n == 30 {
				break
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

var _ = ebpf.ProgramID(0)

// forksNow is the processes started since boot (/proc/stat "processes").
func forksNow() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "processes "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
