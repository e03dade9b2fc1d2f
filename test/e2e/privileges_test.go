package e2e

import (
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

const capSysAdmin = 21

// TestRecordDropsCapabilities runs the binary a plain `go build` makes
// (with cgo when gcc is installed, as here) and reads the capabilities of
// every thread of the running record from /proc once it is recording:
// CAP_SYS_ADMIN must be gone. The output goes to a directory root does not
// own, which record can still write (it keeps CAP_DAC_OVERRIDE for that).
// dropLine is what record -v logs once it dropped its capabilities.
const dropLine = "dropped capabilities not needed after start-up"

func TestRecordDropsCapabilities(t *testing.T) {
	testutil.RequireRoot(t)
	info, err := exec.Command("go", "version", "-m", binPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	cgo := strings.Contains(string(info), "CGO_ENABLED=1")
	t.Logf("binary built with cgo: %v", cgo)

	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil { // nobody
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p.folded")
	// A busy process, so that the recording has samples: a recording of
	// nothing is an error, which is not what this test is about.
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	rec := exec.Command(binPath, "record", "-v", "--duration", "4s", "--output", out)
	stderr, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 1)
	dropped := make(chan struct{})
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		seen := false
		for {
			n, err := stderr.Read(buf)
			b.Write(buf[:n])
			if !seen && strings.Contains(b.String(), dropLine) {
				seen = true
				close(dropped)
			}
			if err != nil {
				break
			}
		}
		logs <- b.String()
	}()
	// Read the threads once record says it dropped them (after attach: on
	// a loaded machine start-up takes seconds), while it still records.
	select {
	case <-dropped:
	case <-time.After(30 * time.Second):
		t.Fatal("record logged no capability drop within 30 s")
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", rec.Process.Pid))
	if len(tasks) == 0 {
		t.Fatal("no threads of the record process")
	}
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k != "CapEff" && k != "CapPrm" && k != "CapBnd" {
				continue
			}
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if caps&(1<<capSysAdmin) != 0 {
				t.Errorf("thread %s: %s %#x still has CAP_SYS_ADMIN while recording", filepath.Base(filepath.Dir(st)), k, caps)
			}
		}
	}
	err = rec.Wait()
	log := <-logs
	if err != nil {
		t.Fatalf("record: %v\n%s", err, grepLines(log, "capabilit", "error", "spanprof"))
	}
	if !strings.Contains(log, dropLine) {
		t.Errorf("no drop in the log:\n%s", grepLines(log, "capabilit"))
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Errorf("output in a directory root does not own: %v", err)
	}
	t.Logf("checked %d threads", len(tasks))
}
