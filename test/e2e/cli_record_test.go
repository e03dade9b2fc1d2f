package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/spanprof/spanprof/internal/testutil"
)

// runSpanprof runs the binary and returns stdout, stderr and the exit code.
func runSpanprof(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binPath, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// TestRecordRefusesBeforeSampling: mistakes in the command line are
// reported at once, in at most two lines (the problem and where the help
// is), before a program is loaded or a second is spent recording.
func TestRecordRefusesBeforeSampling(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing directory", []string{"record", "--output", "/nonexistent-spanprof/x.folded"}, "output /nonexistent-spanprof/x.folded: directory /nonexistent-spanprof does not exist"},
		{"directory", []string{"record", "--output", dir}, "output " + dir + " is a directory"},
		{"directory named like a file", []string{"record", "--output", dir + "/"}, "is a directory"},
		{"stdout without format", []string{"record", "--output", "-"}, "output to stdout needs --format"},
		{"unknown format", []string{"record", "--output", "-", "--format", "svg"}, `--format "svg"`},
		{"format without output", []string{"record", "--format", "folded"}, "--format needs --output"},
		{"flag typo", []string{"record", "--durtion", "2s"}, "flag provided but not defined: -durtion (did you mean --duration?)"},
		{"duration without unit", []string{"record", "--duration", "2"}, "missing unit (2s?)"},
		{"command typo", []string{"recrod"}, `unknown command "recrod" (did you mean "record"?)`},
		{"help of unknown command", []string{"help", "recrod"}, `(did you mean "record"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			stdout, stderr, code := runSpanprof(t, tt.args...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 1 || stdout != "" {
				t.Errorf("want at most two lines on stderr and nothing on stdout, got:\n%s%s", stderr, stdout)
			}
			if strings.Contains(stderr, ".tmp") || strings.Contains(stderr, "recording") {
				t.Errorf("refused after sampling started, or named a temporary file:\n%s", stderr)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("took %v: the check came after recording", d)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left files in the output directory: %v", entries)
	}
}

// TestHelpAndVersion: "help record" is record's help, on stdout, exit 0;
// version names the build.
func TestHelpAndVersion(t *testing.T) {
	testutil.RequireRoot(t)
	helpCmd, _, code1 := runSpanprof(t, "help", "record")
	helpFlag, _, code2 := runSpanprof(t, "record", "-h")
	if code1 != 0 || code2 != 0 || helpCmd != helpFlag || !strings.Contains(helpCmd, "-duration") || !strings.HasPrefix(helpCmd, "usage: spanprof record") {
		t.Fatalf("help record (exit %d):\n%s\nrecord -h (exit %d):\n%s", code1, helpCmd, code2, helpFlag)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, stderr, code := runSpanprof(t, args...)
		if code != 0 || !strings.HasPrefix(out, "spanprof ") || !strings.Contains(out, "go1.") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

// TestRecordThreadIDMeansItsProcess: a thread id given to --pid records
// the thread's process and says so; a repeated pid counts once.
func TestRecordThreadIDMeansItsProcess(t *testing.T) {
	testutil.RequireRoot(t)
	fix := startFixture(t, "gofix", "60000")
	pid := fix.Process.Pid
	tid := otherThread(t, pid)
	out := filepath.Join(t.TempDir(), "p.folded")
	stderr := spanprof(t, "record", "--pid", strconv.Itoa(tid), "--pid", strconv.Itoa(pid), "--duration", "1s", "--output", out)
	if want := fmt.Sprintf("%d is a thread of process %d (gofix)", tid, pid); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if want := fmt.Sprintf("recording pid [%d] at", pid); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q (once):\n%s", want, stderr)
	}
	if n := foldedSamples(t, out, "main.spinInner"); n < 50 {
		t.Errorf("%d samples in main.spinInner, want the process's ~99", n)
	}
}

// otherThread returns a thread of pid that is not its main thread.
func otherThread(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if tid, _ := strconv.Atoi(e.Name()); tid != pid && tid > 0 {
			return tid
		}
	}
	t.Fatalf("process %d has one thread", pid)
	return 0
}

// foldedSamples sums the counts of the folded lines whose stack holds fn.
func foldedSamples(t *testing.T, path, fn string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return foldedCount(t, string(data), fn)
}

func foldedCount(t *testing.T, data, fn string) int {
	t.Helper()
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(data), "\n") {
		i := strings.LastIndexByte(line, ' ')
		c, err := strconv.Atoi(line[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("not a folded line: %q", line)
		}
		if strings.Contains(line[:i], fn) {
			n += c
		}
	}
	return n
}

// TestRecordNothingIsAnError: an idle target gives no sample, which is an
// error naming the reason, not an empty success.
func TestRecordNothingIsAnError(t *testing.T) {
	testutil.RequireRoot(t)
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	out := filepath.Join(t.TempDir(), "p.folded")
	_, stderr, code := runSpanprof(t, "record", "--pid", strconv.Itoa(sleeper.Process.Pid), "--duration", "1s", "--output", out)
	want := fmt.Sprintf("nothing recorded in 1s: pid %d (sleep) used no CPU time", sleeper.Process.Pid)
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 1 and %q:\n%s", code, want, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("an empty profile was written")
	}
}

// TestRecordUnreadableProcess: a process whose maps even root may not read
// (it holds capabilities this container's root lacks) is refused with why.
func TestRecordUnreadableProcess(t *testing.T) {
	testutil.RequireRoot(t)
	f, err := os.Open("/proc/1/maps")
	if err == nil {
		f.Close()
		t.Skip("this machine lets root read pid 1: no unreadable process to name")
	}
	_, stderr, code := runSpanprof(t, "record", "--pid", "1", "--duration", "1s")
	if code != 1 || !strings.Contains(stderr, "cannot read process 1 (") || !strings.Contains(stderr, "permission denied:") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("want one line:\n%s", stderr)
	}
}

// TestRecordFoldedToStdout: --output - --format folded pipes collapsed
// stacks to other tools; stderr, a pipe here, gets no progress line.
func TestRecordFoldedToStdout(t *testing.T) {
	testutil.RequireRoot(t)
	fix := startFixture(t, "gofix", "60000")
	stdout, stderr, code := runSpanprof(t, "record", "--pid", strconv.Itoa(fix.Process.Pid), "--duration", "2s", "--output", "-", "--format", "folded")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if n := foldedCount(t, stdout, "main.spinInner"); n < 100 {
		t.Errorf("%d samples in main.spinInner on stdout, want ~198", n)
	}
	if strings.Contains(stderr, "\r") || strings.Contains(stderr, "left") {
		t.Errorf("progress written to a pipe:\n%q", stderr)
	}
	if !strings.Contains(stderr, "samples to stdout") {
		t.Errorf("stderr does not say what was written:\n%s", stderr)
	}
}

// TestRecordProgressOnTerminal: on a terminal, stderr shows the samples so
// far and the time left, and the line is erased before the last words.
func TestRecordProgressOnTerminal(t *testing.T) {
	testutil.RequireRoot(t)
	master, slave := openPTY(t)
	fix := startFixture(t, "gofix", "60000")
	out := filepath.Join(t.TempDir(), "p.folded")
	cmd := exec.Command(binPath, "record", "--pid", strconv.Itoa(fix.Process.Pid), "--duration", "3s", "--output", out)
	cmd.Stderr = slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var tty bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReader(master)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			tty.Write(buf[:n])
			if err != nil {
				return // EIO once the last writer closed the terminal
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("record: %v", err)
	}
	<-done
	s := tty.String()
	if !strings.Contains(s, " left") || !strings.Contains(s, "\r\033[K") {
		t.Fatalf("no progress on the terminal:\n%q", s)
	}
	if !strings.Contains(s, "0s left") && !strings.Contains(s, "1s left") {
		t.Errorf("progress does not count down:\n%q", s)
	}
}

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlock pty: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("pty number: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	return m, s
}

// TestServeWildcardURL: serving on 0.0.0.0 prints URLs a browser can open,
// and the first one answers.
func TestServeWildcardURL(t *testing.T) {
	testutil.RequireRoot(t)
	fix := startFixture(t, "gofix", "60000")
	prof := filepath.Join(t.TempDir(), "p.otlp.json")
	spanprof(t, "record", "--pid", strconv.Itoa(fix.Process.Pid), "--duration", "1s", "--output", prof)
	cmd := exec.Command(binPath, "serve", "--listen", "0.0.0.0:0", prof)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	i := strings.Index(line, "http://127.0.0.1:")
	if !strings.HasPrefix(line, "spanprof: serving 1 profile on http://127.0.0.1:") || !strings.Contains(line, " and http://"+host+":") || i < 0 {
		t.Fatalf("serve printed %q", line)
	}
	url := strings.Fields(line[i:])[0]
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
}

// TestCheckUnreadableProcess: check of a process root may not read says
// why, not "needs root".
func TestCheckUnreadableProcess(t *testing.T) {
	testutil.RequireRoot(t)
	if f, err := os.Open("/proc/1/maps"); err == nil {
		f.Close()
		t.Skip("this machine lets root read pid 1: no unreadable process to name")
	}
	_, stderr, code := runSpanprof(t, "check", "1")
	if code != 1 || !strings.Contains(stderr, "cannot read process 1 (") || strings.Contains(stderr, "needs root") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// fixtureCPU reads the CPU time gofix prints at its exit (cpu_ns).
func fixtureCPU(t *testing.T, stdout string) time.Duration {
	t.Helper()
	for _, l := range strings.Split(stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "cpu_ns "); ok {
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("fixture output %q: %v", l, err)
			}
			return time.Duration(ns)
		}
	}
	t.Fatalf("the fixture did not print its CPU time: %q", stdout)
	return 0
}

// TestRecordCommand: `record -- CMD ARGS` starts the command, records it
// from its start to its exit (not for the default 10s), passes its output
// through and says how it ended.
func TestRecordCommand(t *testing.T) {
	testutil.RequireRoot(t)
	out := filepath.Join(t.TempDir(), "p.folded")
	start := time.Now()
	stdout, stderr, code := runSpanprof(t, "record", "--output", out, "--", filepath.Join(fixtures, "gofix"), "1500")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "until it exits") || !strings.Contains(stderr, "spanprof: gofix exited\n") {
		t.Errorf("stderr does not say the recording followed the command:\n%s", stderr)
	}
	if !strings.HasPrefix(stdout, "ready ") {
		t.Errorf("the command's output was not passed through: %q", stdout)
	}
	// 1.5s of one spinning thread at 99 Hz: about 148 samples on an idle
	// machine. The fixture says how much CPU it got (less on a busy one),
	// and the samples are judged against that.
	cpu := fixtureCPU(t, stdout)
	want := 0.7 * 99 * cpu.Seconds()
	if n := foldedSamples(t, out, "main.spinInner"); float64(n) < want || n < 20 {
		t.Errorf("%d samples in main.spinInner, want ≥ %.0f (70%% of 99 Hz over the %v of CPU the fixture got) and ≥ 20", n, want, cpu)
	}
	if took > 8*time.Second {
		t.Errorf("took %v: the recording did not end with the command", took)
	}

	_, stderr, code = runSpanprof(t, "record", "--", "no-such-command-spanprof")
	if code != 1 || !strings.Contains(stderr, `start no-such-command-spanprof: exec: "no-such-command-spanprof": executable file not found`) {
		t.Errorf("missing command: exit %d, %q", code, stderr)
	}
	_, stderr, code = runSpanprof(t, "record", "--pid", "1", "--", "true")
	if code != 1 || !strings.Contains(stderr, "excludes --pid") {
		t.Errorf("--pid with a command: exit %d, %q", code, stderr)
	}
}
