package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// gateCommand is the hidden subcommand a profiled command starts as: it
// waits until the recording is set up, then execs the command in place,
// so the pid spanprof filters on is the command's from its first
// instruction (a fork after the eBPF programs load would not know the pid
// in advance).
const gateCommand = "__exec-when-recording"

// gated is a command started by `record -- CMD ARGS…`, held before its
// exec until release.
type gated struct {
	cmd     *exec.Cmd
	release *os.File // closing it lets the command run
	name    string
	done    chan struct{}
	err     error // the command's exit, once done is closed
}

// startGated starts argv held at the gate. Its output goes to out
// (spanprof's stdout, or its stderr when the profile goes to stdout).
func startGated(argv []string, stdin io.Reader, out, errOut io.Writer) (*gated, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start %s: find spanprof's own binary: %w", argv[0], err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{gateCommand, path}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, errOut
	cmd.ExtraFiles = []*os.File{r} // fd 3
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	g := &gated{cmd: cmd, release: w, name: filepath.Base(argv[0]), done: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

// Pid is the command's process id.
func (g *gated) Pid() int { return g.cmd.Process.Pid }

// Run lets the command exec.
func (g *gated) Run() { g.release.Close() }

// Kill ends a command that never ran (the recording failed to start) or
// outlived the recording.
func (g *gated) Kill() {
	g.release.Close()
	select {
	case <-g.done:
	default:
		g.cmd.Process.Kill()
		<-g.done
	}
}

// Exited says how the command ended, for stderr.
func (g *gated) Exited() string {
	var ee *exec.ExitError
	switch {
	case g.err == nil:
		return fmt.Sprintf("%s exited", g.name)
	case errors.As(g.err, &ee) && ee.ExitCode() >= 0:
		return fmt.Sprintf("%s exited with status %d", g.name, ee.ExitCode())
	case errors.As(g.err, &ee):
		return fmt.Sprintf("%s ended by %v", g.name, ee.ProcessState.Sys().(syscall.WaitStatus).Signal())
	}
	return fmt.Sprintf("%s: %v", g.name, g.err)
}

// runGate is the gate's side: wait for the release (end of file on fd 3),
// then become the command.
func runGate(args []string, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "spanprof: internal command used without a command")
		return 1
	}
	gate := os.NewFile(3, "gate")
	_, _ = io.Copy(io.Discard, gate)
	gate.Close()
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(stderr, "spanprof: exec %s: %v\n", strings.Join(args[1:], " "), err)
	return 127
}
