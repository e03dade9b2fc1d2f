package correlate

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/proc"
)

// countingReads hands over the tracker's snapshots and counts them.
type countingReads struct {
	t           *proc.Tracker
	asked, gave int
}

func (r *countingReads) Snapshot(pid uint32) *proc.Snapshot {
	r.asked++
	s := r.t.Snapshot(pid)
	if s != nil {
		r.gave++
	}
	return s
}

// TestScanSharesTrackerRead: with ShareReads, the scan of a new process
// learns from the tracker's read what its own read would give: the
// service named in the environment and the executable's identity (for the
// Go check) come from the snapshot.
func TestScanSharesTrackerRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"OTEL_SERVICE_NAME=checkout"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)

	var exes []*unix.Stat_t
	goc := func(pid int, exe *unix.Stat_t) (bpf.SamplerProcConfig, error) {
		exes = append(exes, exe)
		return bpf.SamplerProcConfig{}, ErrNotGo
	}
	tr := proc.NewTracker("/proc", nil)
	defer tr.Close()
	reads := &countingReads{t: tr}
	w := New(&fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}, goc, nil)
	w.ShareReads(reads)
	if err := w.Scan(pid); err != nil {
		t.Fatal(err)
	}
	if info, _ := w.Info(pid); info.ServiceName != "checkout" {
		t.Errorf("service %q, want checkout", info.ServiceName)
	}
	if reads.gave != 1 || tr.Len() != 1 {
		t.Errorf("snapshots handed over %d, processes tracked %d: want the tracker's one read shared", reads.gave, tr.Len())
	}
	var want unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(int(pid))+"/exe", &want); err != nil {
		t.Fatal(err)
	}
	if len(exes) != 1 || exes[0] == nil || exes[0].Ino != want.Ino || exes[0].Dev != want.Dev {
		t.Errorf("the Go check got executable %+v, want the snapshot's stat of inode %d", exes, want.Ino)
	}
	// A rescan finds no fresh snapshot and reads /proc itself, learning
	// the same.
	if err := w.Scan(pid); err != nil {
		t.Fatal(err)
	}
	if info, _ := w.Info(pid); info.ServiceName != "checkout" || reads.asked != 2 || reads.gave != 1 || exes[1] != nil {
		t.Errorf("rescan: service %q, snapshots asked %d given %d, exe %v", info.ServiceName, reads.asked, reads.gave, exes[1])
	}
}
