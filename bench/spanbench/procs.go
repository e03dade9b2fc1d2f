package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a started command whose output is kept for matching.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs name with args, stdout and stderr merged into one buffer.
func start(name string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(name, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Own process group, so a stop reaches children (fanout) and the
	// terminal's signals do not reach the profilers.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitFor waits until the output contains s or the process ends.
func (p *proc) waitFor(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.out.String(), s) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %q: %v\n%s", p.cmd.Path, s, p.err, tail(p.out.String()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: no %q after %v\n%s", p.cmd.Path, s, timeout, tail(p.out.String()))
}

// wait waits for the process to end by itself.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s: %v\n%s", p.cmd.Path, p.err, tail(p.out.String()))
		}
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s: still running after %v", p.cmd.Path, timeout)
	}
}

// stop sends sig and waits; SIGKILL after the grace period.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	_ = syscall.Kill(p.pid(), sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// cpuTotal is utime+stime of the ended process (rusage), and its peak
// RSS in KiB.
func (p *proc) rusage() (cpu time.Duration, maxRSSKiB int64) {
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Maxrss
}

var clkTck = 100.0 // USER_HZ on Linux

// cpuNow is utime+stime of a live process from /proc/PID/stat.
func cpuNow(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return time.Duration((ut + st) / clkTck * 1e9), nil
}

// statusKiB reads a "Name: N kB" line of /proc/PID/status.
func statusKiB(pid int, name string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// field returns the integer after "key " in out (e.g. "elapsed_ns 123").
func field(out, key string) (int64, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %q in output:\n%s", key, tail(out))
}
