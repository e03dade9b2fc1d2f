package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// agentCases are the runs of the agent phase, in the order they run;
// -agent-cases picks some.
var agentCases = []string{"fanout", "one", "busy", "churn", "bignode"}

// runAgent measures `spanprof agent` exporting to a do-nothing OTLP sink:
// peak RSS and CPU with 200 processes of 10 threads (distinct executables,
// then forks of one executable with its libc's debug file installed), CPU
// at 99 Hz on two busy CPUs with a perf profile of the agent, and CPU per
// exec under process churn.
func (b *bench) runAgent() error {
	s, err := startSink()
	if err != nil {
		return err
	}
	defer s.stop()
	base := []string{"agent", "--endpoint", s.addr, "--insecure", "--report-interval", "10s",
		"--frequency", "99", "--metrics-listen", "off"}
	steps := map[string]func() error{
		"fanout":  func() error { return b.agentFanout(base) },
		"one":     func() error { return b.agentOneExe(base) },
		"busy":    func() error { return b.agentBusy(base) },
		"churn":   func() error { return b.agentChurn(base, s) },
		"bignode": func() error { return b.agentBigNode(base, s) },
	}
	var errs []error
	for _, c := range agentCases {
		if b.agentCases[c] {
			if err := steps[c](); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c, err))
			}
		}
	}
	b.logf("sink got %d export requests", s.requests.Load())
	return errors.Join(errs...)
}

// agentFanout runs the agent on 200 distinct executables × 10 threads,
// with and without --off-cpu.
func (b *bench) agentFanout(base []string) error {
	for _, offCPU := range []bool{false, true} {
		label := "agent, 200 processes x 10 threads"
		args := slices.Clone(base)
		if offCPU {
			label += ", --off-cpu"
			args = append(args, "--off-cpu")
		}
		b.logf("%s, %d s", label, b.agentScaleSecs)
		fan, pids, err := b.startFanout(200, 10, b.agentScaleSecs+60)
		if err != nil {
			return err
		}
		row := costRow{label: label, freq: 99, procs: 200, threads: 2000}
		row, err = b.measureSpanprof(row, append(args, pidArgs(pids)...), "agent started", b.agentScaleSecs, 0)
		fan.kill()
		if err != nil {
			return err
		}
		b.agents = append(b.agents, row)
	}
	return nil
}

// oneExeWarmup is how long the one-executable case lets the agent run
// before its window: the first reports symbolize every process's stacks
// and load libc's debug information; the window is the steady state a
// user sees after start-up.
const oneExeWarmup = 12 * time.Second

// agentOneExe runs the agent on 200 forks of one glibc executable × 10
// threads, with Debian's libc6-dbg installed: every process maps the same
// files, and libc's samples are symbolized from its separate debug file.
// Its RSS and CPU are held to the same bars as the distinct executables.
func (b *bench) agentOneExe(base []string) error {
	builds := []string{b.spanprof}
	if b.reference != "" {
		builds = append(builds, b.reference)
	}
	for r := range b.rounds {
		for i := range builds {
			bin := builds[(i+r)%len(builds)]
			fan, pids, err := b.startForks(200, 10, b.agentScaleSecs+60+int(oneExeWarmup.Seconds()))
			if err != nil {
				return err
			}
			if r == 0 && i == 0 {
				dbg, err := libcDebugFile(pids[0])
				if err != nil {
					fan.kill()
					b.logf("one executable: skipped: %v", err)
					b.skipped = append(b.skipped, fmt.Sprintf("200 processes of one executable with libc's debug file: %v", err))
					return nil
				}
				b.logf("one executable: libc's debug file %s", dbg)
			}
			label := "agent, 200 processes x 10 threads, one executable, libc6-dbg"
			if bin == b.reference {
				label += ", reference build"
			}
			b.logf("%s, round %d/%d, %v warm-up, %d s", label, r+1, b.rounds, oneExeWarmup, b.agentScaleSecs)
			row := costRow{round: r, label: label, freq: 99, procs: 200, threads: 2000, warmup: oneExeWarmup, bin: bin}
			row, err = b.measureSpanprof(row, append(slices.Clone(base), pidArgs(pids)...), "agent started", b.agentScaleSecs, 0)
			fan.kill()
			if err != nil {
				return err
			}
			b.agents = append(b.agents, row)
		}
	}
	return nil
}

// agentBusy measures the agent's CPU at 99 Hz on 2 busy processes, with
// --pid and with --all, each with perf recording the agent.
func (b *bench) agentBusy(base []string) error {
	for _, all := range []bool{false, true} {
		label := "agent, 2 busy processes (--pid)"
		ps, pids, err := b.startBusy(2, b.agentSecs+60)
		if err != nil {
			return err
		}
		args := slices.Clone(base)
		if all {
			label = "agent, --all (shared machine)"
		} else {
			args = append(args, pidArgs(pids)...)
		}
		b.logf("%s, %d s, perf -p on the agent", label, b.agentSecs)
		row := costRow{label: label, freq: 99, procs: 2, threads: 2}
		row, err = b.measureSpanprof(row, args, "agent started", b.agentSecs, 4999)
		for _, p := range ps {
			p.kill()
		}
		if err != nil {
			return err
		}
		b.agents = append(b.agents, row)
	}
	return nil
}

// agentChurn measures the agent under short-lived children, most gone
// before the report that carries their samples: with --all, and with the
// agent's executable filter naming the children, which leaves out the
// samples of the other processes of a shared machine (their symbols
// would be part of the figure) but not their execs. With -reference,
// both builds run in alternated rounds (the order rotated per round), so
// before and after see the same machine.
func (b *bench) agentChurn(base []string, s *sink) error {
	builds := []string{b.spanprof}
	rounds := 1
	if b.reference != "" {
		builds, rounds = append(builds, b.reference), b.rounds
	}
	cfg := filepath.Join(b.tmp, "churn-agent.yaml")
	if err := os.WriteFile(cfg, []byte("processes:\n  executables: [churn-child]\n"), 0o644); err != nil {
		return err
	}
	selections := []struct {
		label string
		args  []string
	}{
		{"--all", nil},
		{"executables: [churn-child]", []string{"--config", cfg}},
	}
	for r := range rounds {
		for _, sel := range selections {
			for i := range builds {
				bin := builds[(i+r)%len(builds)]
				label := fmt.Sprintf("agent, %s, %d processes/s (churn)", sel.label, churnRate)
				if bin == b.reference {
					label += ", reference build"
				}
				b.logf("%s, round %d/%d, %d s", label, r+1, rounds, b.agentScaleSecs)
				churn, err := start(filepath.Join(b.root, "testdata/reliability/build/churn"),
					filepath.Join(b.root, "testdata/reliability/build/churn-child"),
					strconv.Itoa(churnRate), strconv.Itoa(b.agentScaleSecs+30), "300")
				if err != nil {
					return err
				}
				if bin == b.spanprof && sel.args == nil {
					child := "churn-child"
					s.watch.Store(&child)
				}
				// The CPU bar is for steady processes: no bar here.
				row := costRow{round: r, label: label, freq: 99, noBar: true, execRate: churnRate, bin: bin}
				row, err = b.measureSpanprof(row, append(slices.Clone(base), sel.args...), "agent started", b.agentScaleSecs, 0)
				churn.kill()
				s.watch.Store(nil)
				if err != nil {
					return err
				}
				b.agents = append(b.agents, row)
			}
		}
	}
	b.churnSamples, b.churnNamed = s.watched.Load(), s.named.Load()
	b.logf("churn: %d of %d children's samples exported with every frame named", b.churnNamed, b.churnSamples)
	return nil
}

// churnRate is the agent phase's processes started a second.
const churnRate = 500

// startForks starts nproc processes of nthreads threads, forks of the
// fanout binary itself (one executable), for secs.
func (b *bench) startForks(nproc, nthreads, secs int) (*proc, []int, error) {
	return b.runFanout(nproc, nthreads, secs, "")
}

// children waits for a fanout parent's "ready" and returns its children.
func children(p *proc) ([]int, error) {
	if err := p.waitFor("ready", time.Minute); err != nil {
		return nil, err
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid(), p.pid()))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, s := range strings.Fields(string(kids)) {
		n, _ := strconv.Atoi(s)
		pids = append(pids, n)
	}
	return pids, nil
}

// libcDebugFile returns the separate debug file of the libc pid maps,
// found by its GNU build ID under /usr/lib/debug the way the symbolizer
// looks it up, or why there is none (`make bench-deps` installs
// libc6-dbg).
func libcDebugFile(pid int) (string, error) {
	if err := exec.Command("dpkg", "-s", "libc6-dbg").Run(); err != nil {
		return "", fmt.Errorf("libc6-dbg is not installed (make bench-deps installs it)")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	libc := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "/"); i >= 0 && strings.Contains(filepath.Base(sc.Text()[i:]), "libc.so") {
			libc = sc.Text()[i:]
			break
		}
	}
	if libc == "" {
		return "", fmt.Errorf("pid %d maps no libc", pid)
	}
	id, err := buildID(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), libc))
	if err != nil {
		return "", err
	}
	dbg := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(dbg); err != nil {
		return "", fmt.Errorf("no debug file of %s (build ID %s): libc6-dbg does not match libc6: %w", libc, id, err)
	}
	return dbg, nil
}

// buildID reads the GNU build ID note of an ELF file, lowercase hex.
func buildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return "", fmt.Errorf("%s has no build ID", path)
	}
	d, err := sec.Data()
	if err != nil {
		return "", err
	}
	// namesz, descsz, type, "GNU\0", then the ID.
	if len(d) < 16 || !bytes.Equal(d[12:16], []byte("GNU\x00")) {
		return "", fmt.Errorf("%s: malformed build ID note", path)
	}
	descsz := int(f.ByteOrder.Uint32(d[4:8]))
	if len(d) < 16+descsz || descsz < 2 {
		return "", fmt.Errorf("%s: malformed build ID note", path)
	}
	return hex.EncodeToString(d[16 : 16+descsz]), nil
}
