package tracectx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// goSDKToolchains build the SDK service fixture: the SDK needs Go 1.22, so
// this covers both label layouts (map on 1.22/1.23, slice from 1.24).
var goSDKToolchains = []string{"go1.22.12", "go1.23.12", "go1.24.11", "go1.25.5", "local"}

// goTruthSpan is one ground-truth line of the service fixture.
type goTruthSpan struct {
	tid             int
	traceID, spanID string
	start, end      int64 // CLOCK_REALTIME ns, enclosing the labels' time
	function        string
	held, released  int64 // inside the labels' time
}

func readGoTruth(t *testing.T, path string) []goTruthSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var spans []goTruthSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s goTruthSpan
		var goid int64
		if _, err := fmt.Sscan(sc.Text(), &goid, &s.tid, &s.traceID, &s.spanID, &s.start, &s.end, &s.function, &s.held, &s.released); err != nil {
			t.Fatalf("parse ground truth %q: %v", sc.Text(), err)
		}
		spans = append(spans, s)
	}
	return spans
}

// goLabelRead is one ReadLabels of a thread, bracketed by wall-clock time.
type goLabelRead struct {
	tid           int
	running       bool // state R just before the read: on a CPU or about to be
	before, after int64
	labels        map[string]string
}

// TestReadLabelsService runs the SDK service fixture and reads every thread's
// goroutine labels while it works, then checks each read against the ground
// truth: a read carrying a span must fall in that span's window (start..end)
// on the thread that worked in it, with the span's name; a read inside the
// span's inner window (held..released) on its thread should carry the span.
func TestReadLabelsService(t *testing.T) {
	testutil.RequireRoot(t, "ptrace and process_vm_readv of another process need root")
	for _, tc := range goSDKToolchains {
		t.Run(tc, func(t *testing.T) {
			bin := buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "service", stripped: tc != "local"})
			info, err := GoOffsets(bin)
			if err != nil {
				t.Fatalf("GoOffsets: %v", err)
			}
			truthPath := filepath.Join(t.TempDir(), "truth.txt")
			// The fixture runs until goSampleThreads has enough reads
			// and stops it (the duration is a backstop): in a fixed
			// 1.5 s, a loaded machine left as few as 10 labeled reads.
			cmd := exec.Command(bin, "-workers", "3", "-gomaxprocs", "8", "-duration", "50s", "-out", truthPath)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // "ready PID"
				t.Fatalf("fixture did not start: %v", err)
			}
			// No cmd.Wait until sampling ends: a wait on the leader
			// would take the leader's ptrace stops.
			reads := goSampleThreads(t, cmd.Process.Pid, info)
			// ReadLabels's wait for a stop of the leader thread may have
			// reaped the exiting leader itself (ECHILD here); the ground
			// truth is complete by then: it is closed before exit.
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			select {
			case err := <-waited:
				if err != nil && !errors.Is(err, unix.ECHILD) {
					t.Fatalf("fixture: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("fixture did not exit: %s", goThreadStates(cmd.Process.Pid))
				_ = cmd.Process.Kill()
				t.FailNow()
			}
			goCheckReads(t, reads, readGoTruth(t, truthPath))
		})
	}
}

// goSampleThreads reads the labels of every thread of pid, round after
// round, until the process exits. It asks the process to exit (SIGTERM:
// the service fixture then writes its ground truth) once it has run
// 1.5 s and goEnoughLabeled reads carried labels, or after 30 s.
func goSampleThreads(t *testing.T, pid int, info *GoRuntimeInfo) []goLabelRead {
	t.Helper()
	var reads []goLabelRead
	start := time.Now()
	deadline := start.Add(time.Minute)
	labeled, stopped := 0, false
	for {
		if goProcessExited(pid) {
			return reads
		}
		if time.Now().After(deadline) {
			t.Fatalf("fixture %d still running after a minute", pid)
		}
		if ran := time.Since(start); !stopped && (ran > 30*time.Second || ran > 1500*time.Millisecond && labeled >= goEnoughLabeled) {
			if err := unix.Kill(pid, unix.SIGTERM); err != nil {
				t.Fatalf("stop fixture %d: %v", pid, err)
			}
			stopped = true
		}
		tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // exiting
		}
		for _, e := range tids {
			tid, _ := strconv.Atoi(e.Name())
			running := goThreadRunning(pid, tid)
			before := time.Now().UnixNano()
			l, err := ReadLabels(pid, tid, info)
			after := time.Now().UnixNano()
			if err != nil {
				if errors.Is(err, unix.ESRCH) || goThreadGone(pid, tid) || goProcessExited(pid) {
					continue // the thread exited (child goroutines' threads do)
				}
				t.Fatalf("ReadLabels(%d, %d): %v", pid, tid, err)
			}
			reads = append(reads, goLabelRead{tid: tid, running: running, before: before, after: after, labels: l})
			if l["span_id"] != "" {
				labeled++
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// goProcessExited says whether pid is a zombie (or gone): our child that
// exited and that we have not waited for yet.
func goProcessExited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// goThreadRunning says whether tid is runnable (state R). A worker whose
// goroutine waits for a P, or was preempted, sleeps in the scheduler with
// no goroutine on its M: it is off-CPU, and an on-CPU sampler never sees
// that window.
func goThreadRunning(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'R'
}

// goThreadStates lists "tid:state" of every thread of pid, for a failure
// message.
func goThreadStates(pid int) string {
	var states []string
	tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, e := range tids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			states = append(states, e.Name()+":"+string(b[i+2]))
		}
	}
	return strings.Join(states, " ")
}

func goThreadGone(pid, tid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid))
	return err != nil
}

// goEnoughLabeled is how many reads with labels goSampleThreads collects;
// goCheckReads wants a third of them at least.
const goEnoughLabeled = 60

func goCheckReads(t *testing.T, reads []goLabelRead, truth []goTruthSpan) {
	t.Helper()
	// A read counts as inside a span when its bracket lies in the span's
	// inner window: the thread stopped while the goroutine held the
	// labels.
	names := map[string]string{} // span_id → span function
	for _, s := range truth {
		if s.function != "childWork" {
			names[s.spanID] = s.function
		}
	}
	var labeled, inside, missed int
	for _, r := range reads {
		var in *goTruthSpan
		for i := range truth {
			s := &truth[i]
			if s.tid == r.tid && r.before >= s.held && r.after <= s.released {
				in = s
			}
		}
		if in != nil && r.running {
			inside++
			if r.labels["span_id"] == "" {
				missed++
			}
		}
		if r.labels["span_id"] == "" {
			continue
		}
		labeled++
		ok := false
		for _, s := range truth {
			if s.tid == r.tid && s.spanID == r.labels["span_id"] && s.traceID == r.labels["trace_id"] &&
				r.after >= s.start && r.before <= s.end {
				ok = true
				break
			}
		}
		if !ok {
			var same []string
			for _, s := range truth {
				if s.spanID == r.labels["span_id"] {
					same = append(same, fmt.Sprintf("{tid %d %s %+dns..%+dns}", s.tid, s.function, s.start-r.before, s.end-r.after))
				}
			}
			t.Errorf("tid %d: labels %v match no ground-truth span of that thread; the span's lines: %v",
				r.tid, r.labels, same)
		}
		if want := names[r.labels["span_id"]]; r.labels["span_name"] != want {
			t.Errorf("tid %d: span_name %q, want %q", r.tid, r.labels["span_name"], want)
		}
	}
	t.Logf("%d reads, %d of a running thread inside a span window, %d of those without labels, %d labeled", len(reads), inside, missed, labeled)
	if labeled < goEnoughLabeled/3 {
		t.Errorf("only %d reads carried labels", labeled)
	}
	// A running thread inside its span runs the span's goroutine, or the
	// scheduler for it (the workers are locked to their threads): every
	// such read finds the labels, through m.curg or m.lockedg.
	if missed > 0 {
		t.Errorf("%d of %d reads inside a span found no labels", missed, inside)
	}
}
