package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// chain is the fixture's call chain, leaf first.
var chain = []string{"level5", "level4", "level3", "level2", "level1", "main"}

// hasChain reports whether frames (leaf first) contain want as a
// contiguous run ending the user part at main.
func hasChain(frames, want []string) bool {
	for i := range frames {
		if frames[i] != want[0] {
			continue
		}
		if i+len(want) > len(frames) {
			return false
		}
		for j := range want {
			if frames[i+j] != want[j] {
				return false
			}
		}
		return true
	}
	return false
}

// inChain reports whether a sample's stack contains the chain from its
// innermost level present down to main.
func inChain(frames []string) bool {
	for k := range chain {
		if hasChain(frames, chain[k:]) {
			return true
		}
	}
	return false
}

func TestRecordCallChain(t *testing.T) {
	testutil.RequireRoot(t)
	for _, cc := range []string{"gcc", "clang"} {
		t.Run(cc, func(t *testing.T) {
			dir := t.TempDir()
			marks := filepath.Join(dir, "marks")
			fix := startFixture(t, "chain-"+cc, "60000", marks)
			out := filepath.Join(dir, "p.otlp.json")
			spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "3s", "--output", out)
			samples := readOTLP(t, out)
			var n, whole, leaf, leafWithCaller int
			for _, s := range samples {
				if s.PID != int64(fix.Process.Pid) {
					t.Fatalf("sample of pid %d in a --pid %d recording", s.PID, fix.Process.Pid)
				}
				user := userFrames(s.Frames)
				cnt := len(s.Times)
				n += cnt
				if inChain(user) && user[len(user)-1] != "" {
					whole += cnt
				} else if testing.Verbose() {
					t.Logf("incomplete stack: %v", s.Frames)
				}
				if len(user) > 0 && user[0] == "level5" {
					leaf += cnt
					if len(user) > 1 && user[1] == "level4" {
						leafWithCaller += cnt
					}
				}
			}
			t.Logf("%s: %d samples, %d with the whole chain (%.2f%%), %d in the leaf, %d with its caller",
				cc, n, whole, 100*float64(whole)/float64(n), leaf, leafWithCaller)
			// The fixture is busy 80% of the time; on a loaded machine it
			// gets less CPU, so only insist on enough samples to judge.
			if n < 300 {
				t.Fatalf("only %d samples in 3s at 999 Hz", n)
			}
			if float64(whole) < 0.99*float64(n) {
				t.Fatalf("%d of %d samples have the whole chain to main, want ≥ 99%%", whole, n)
			}
			if leaf == 0 || leafWithCaller != leaf {
				t.Fatalf("leaf caller recovered in %d of %d leaf samples", leafWithCaller, leaf)
			}
			checkTimestamps(t, samples, marks)
		})
	}
}

// userFrames drops the kernel part of a stack (frames before the first
// fixture or libc frame are the kernel's when the tick hit in kernel
// mode); the test fixture's stacks are user-only on a CPU-bound loop, so
// this keeps every frame after the last kernel-looking one.
func userFrames(frames []string) []string {
	for i, f := range frames {
		for _, c := range chain {
			if f == c {
				return frames[i:]
			}
		}
		if f == "syscall_loop" {
			return frames[i:]
		}
	}
	return frames
}

// checkTimestamps asserts that every sample lies within a busy window the
// fixture recorded with its own CLOCK_REALTIME, give or take 1 ms.
func checkTimestamps(t *testing.T, samples []otlpSample, marksPath string) {
	t.Helper()
	f, err := os.Open(marksPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type window struct{ lo, hi uint64 }
	var ws []window
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 2 {
			continue
		}
		lo, _ := strconv.ParseUint(parts[0], 10, 64)
		hi, _ := strconv.ParseUint(parts[1], 10, 64)
		ws = append(ws, window{lo, hi})
	}
	if len(ws) < 10 {
		t.Fatalf("fixture wrote %d busy windows", len(ws))
	}
	const slack = uint64(time.Millisecond)
	var checked, outside int
	var worst uint64
	for _, s := range samples {
		if !inChain(userFrames(s.Frames)) {
			continue
		}
		for _, ts := range s.Times {
			if ts < ws[0].lo || ts > ws[len(ws)-1].hi {
				continue // before the first or after the last complete mark
			}
			checked++
			in := false
			var dist uint64 = 1 << 63
			for _, w := range ws {
				if ts+slack >= w.lo && ts <= w.hi+slack {
					in = true
					break
				}
				if ts < w.lo && w.lo-ts < dist {
					dist = w.lo - ts
				}
				if ts > w.hi && ts-w.hi < dist {
					dist = ts - w.hi
				}
			}
			if !in {
				outside++
				worst = max(worst, dist)
			}
		}
	}
	t.Logf("timestamps: %d checked against %d busy windows, %d outside ±1ms (worst %v)", checked, len(ws), outside, time.Duration(worst))
	if checked < 200 {
		t.Fatalf("only %d timestamps inside the marked period", checked)
	}
	if outside > 0 {
		t.Fatalf("%d of %d sample timestamps fall outside the fixture's busy windows by more than 1ms", outside, checked)
	}
}

func TestRecordSyscallWrapperCaller(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	fix := startFixture(t, "chain-gcc", "60000", filepath.Join(dir, "marks"), "syscall")
	out := filepath.Join(dir, "p.otlp.json")
	spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "2s", "--output", out)
	var inRead, withCaller int
	for _, s := range readOTLP(t, out) {
		// Find the first user frame in libc's read wrapper.
		for i, f := range s.Frames {
			if f == "read" || f == "__libc_read" || f == "__read" {
				inRead += len(s.Times)
				if i+1 < len(s.Frames) && s.Frames[i+1] == "syscall_loop" {
					withCaller += len(s.Times)
				}
				break
			}
		}
	}
	t.Logf("samples in libc read: %d, with syscall_loop as caller: %d", inRead, withCaller)
	if inRead < 100 {
		t.Fatalf("only %d samples inside libc read", inRead)
	}
	if float64(withCaller) < 0.99*float64(inRead) {
		t.Fatalf("caller of libc read recovered in %d of %d samples", withCaller, inRead)
	}
}

func TestRecordGoFunctionNames(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	fix := startFixture(t, "gofix", "60000")
	out := filepath.Join(dir, "p.otlp.json")
	spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "2s", "--output", out)
	var n, named int
	for _, s := range readOTLP(t, out) {
		n += len(s.Times)
		for _, f := range s.Frames {
			if f == "main.spinInner" || f == "main.spinOuter" {
				named += len(s.Times)
				break
			}
		}
	}
	t.Logf("go fixture: %d samples, %d in main.spin*", n, named)
	if n < 200 || float64(named) < 0.95*float64(n) {
		t.Fatalf("%d of %d samples resolve to main.spin*", named, n)
	}
}

func TestRecordPprofOpensWithGoTool(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	fix := startFixture(t, "chain-clang", "60000", filepath.Join(dir, "marks"))
	out := filepath.Join(dir, "p.pb.gz")
	spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--duration", "1s", "--frequency", "499", "--output", out)
	top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, top)
	}
	if !strings.Contains(string(top), "level5") {
		t.Fatalf("pprof -top does not show level5:\n%s", top)
	}
}
