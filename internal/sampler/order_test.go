package sampler

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/testutil"
)

// spinThenExec are processes that spin in one image, then exec bash
// (by its path, which the exec event reports),
// which spins too: from a single thread (dash), and from one of four
// threads of which three spin in the old image until de_thread kills them
// (python3, whose other threads get their own tids).
var spinThenExec = []struct {
	name    string
	oldComm string
	argv    []string
}{
	{"single thread", "sh", []string{"/bin/sh", "-c",
		`i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; exec /usr/bin/bash -c 'for ((i=0;i<40000;i++)); do :; done'`}},
	{"exec from a thread among spinning threads", "python3", []string{"/usr/bin/python3", "-c", `
import os, threading, time
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
def ex():
    t = time.time()
    while time.time() - t < 0.3:
        pass
    os.execv("/usr/bin/bash", ["bash", "-c", "for ((i=0;i<40000;i++)); do :; done"])
threading.Thread(target=ex).start()
`}},
}

// TestStreamOrderAroundExec checks on the real kernel what the consumer
// relies on (docs/dataflow.md): a process's samples in its old image, of
// every thread, come before its exec event on the one channel, and every
// sample after it is of the new image, from the thread that exec'd (which
// has the pid now), never flagged as taken inside the exec. The exec
// event carries the process as the reader read it at decode, which the
// tracker applies to the new image.
func TestStreamOrderAroundExec(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tt := range spinThenExec {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := exec.LookPath(tt.argv[0]); err != nil {
				t.Skipf("%s is not installed: %v", tt.argv[0], err)
			}
			tr := proc.NewTracker("/proc", nil)
			defer tr.Close()
			s := startSampler(t, Options{Frequency: 999, Exec: trackerExec{tr}})
			stop := recordEvents(s)
			pids := map[uint32]bool{}
			for range 3 {
				cmd := exec.Command(tt.argv[0], tt.argv[1:]...)
				if err := cmd.Run(); err != nil {
					t.Fatalf("run %s: %v", tt.argv[0], err)
				}
				pids[uint32(cmd.Process.Pid)] = true
			}
			events := stop()

			// The index of each pid's exec of bash; the exec of the
			// spawned command before it starts the old image.
			execAt := map[uint32]int{}
			var before, after, otherThreads int
			for i, e := range events {
				if p := e.Proc; p != nil && pids[p.PID] && !p.Exit {
					if p.Image == nil || p.Image.Path != "/usr/bin/bash" {
						continue
					}
					if _, dup := execAt[p.PID]; dup {
						t.Fatalf("pid %d: two exec events of bash", p.PID)
					}
					execAt[p.PID] = i
					checkRead(t, tr, p)
					continue
				}
				r := e.Sample
				if r == nil || !pids[r.PID] {
					continue
				}
				at, execd := execAt[r.PID]
				switch {
				case !execd && r.Comm == tt.oldComm:
					before++
					if r.TID != r.PID {
						otherThreads++
					}
				case !execd:
					// Between the new name and the exec event: the
					// exec'ing thread inside execve.
				case r.Comm == tt.oldComm || r.TID != r.PID || r.PreExec:
					t.Errorf("pid %d: sample %d after the exec event %d of the old image (tid %d, %q, pre-exec %v)",
						r.PID, i, at, r.TID, r.Comm, r.PreExec)
				default:
					after++
				}
			}
			t.Logf("%d events, %d exec events of %d processes; %d samples before their exec (%d of other threads), %d after",
				len(events), len(execAt), len(pids), before, otherThreads, after)
			if len(execAt) != len(pids) {
				c, _ := s.Counters()
				t.Fatalf("%d exec events for %d processes; counters %v", len(execAt), len(pids), c)
			}
			if before == 0 || after == 0 {
				t.Fatalf("%d samples before the execs, %d after: nothing to check the order of", before, after)
			}
			if tt.oldComm == "python3" && otherThreads == 0 {
				t.Errorf("no sample of the threads de_thread kills: their order is unchecked")
			}
		})
	}
}

// checkRead applies an exec's read, taken by the reader while the process
// lived, and wants the new image there.
func checkRead(t *testing.T, tr *proc.Tracker, e *ProcEvent) {
	t.Helper()
	if e.Read == nil {
		t.Errorf("pid %d: exec event without the reader's read", e.PID)
		return
	}
	tr.ApplyExec(e.PID, e.Time, e.Read.(*proc.ExecRead))
	p := tr.Get(e.PID)
	if exe, _ := filepath.EvalSymlinks(p.Exe); filepath.Base(exe) != "bash" || len(p.Mappings) == 0 {
		t.Errorf("pid %d after its exec: exe %q with %d mappings, want bash's", e.PID, p.Exe, len(p.Mappings))
	}
}
