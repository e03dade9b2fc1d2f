package correlate

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// countingReads hands over the tracker's snapshots and counts them.
type countingReads struct {
	t           *proc.Tracker
	asked, gave int
}

func (r *countingReads) ProcRead(pid uint32) *tracectx.ProcRead {
	r.asked++
	s := r.t.ProcRead(pid)
	if s != nil {
		r.gave++
	}
	return s
}

// startCheckout starts a process whose environment names the service
// "checkout" and returns its pid once its maps are stable; root only.
func startCheckout(t *testing.T) uint32 {
	t.Helper()
	testutil.RequireRoot(t, "reading another process's memory needs root")
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"OTEL_SERVICE_NAME=checkout"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	waitStableMaps(t, int(pid))
	return pid
}

// TestScanSharesTrackerRead: with ShareReads, the scan of a new process
// learns from the tracker's read what its own read would give: the
// service named in the environment and the executable's identity (for the
// Go check) come from the snapshot.
func TestScanSharesTrackerRead(t *testing.T) {
	pid := startCheckout(t)

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
	// A rescan finds no fresh snapshot and reads the maps itself: the
	// same, so it stops there and keeps what it learnt.
	if err := w.Scan(pid); err != nil {
		t.Fatal(err)
	}
	if info, _ := w.Info(pid); info.ServiceName != "checkout" || reads.asked != 2 || reads.gave != 1 || w.Stats().Unchanged != 1 {
		t.Errorf("rescan: service %q, snapshots asked %d given %d, unchanged %d", info.ServiceName, reads.asked, reads.gave, w.Stats().Unchanged)
	}
}

// TestRescanUnchangedMaps: a rescan of a process whose maps text is what
// it was at a scan that found nothing stops there and keeps what that
// scan learnt; one whose maps changed is scanned whole.
func TestRescanUnchangedMaps(t *testing.T) {
	pid := startCheckout(t)

	w := New(&fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}, nil, nil)
	for i := range 3 {
		if err := w.Scan(pid); err != nil {
			t.Fatal(err)
		}
		if info, _ := w.Info(pid); info.ServiceName != "checkout" || info.Source != "" {
			t.Fatalf("scan %d: info %+v, want the service and no source", i, info)
		}
	}
	if st := w.Stats(); st.Scanned != 3 || st.Unchanged != 2 {
		t.Errorf("scanned %d, unchanged %d: want 3 and 2", st.Scanned, st.Unchanged)
	}
	// An exec forgets the state: the next scan is whole.
	w.Exec(pid)
	if err := w.Scan(pid); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Unchanged != 2 {
		t.Errorf("unchanged %d after an exec, want 2", st.Unchanged)
	}

	// This process maps memory between scans: scanned whole again.
	self := uint32(os.Getpid())
	if err := w.Scan(self); err != nil {
		t.Fatal(err)
	}
	if st := w.procs[self]; st == nil || !st.quiet {
		t.Fatalf("the test process's scan is not quiet (%+v): the check below would not test anything", st)
	}
	b, err := unix.Mmap(-1, 0, 3*os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	before := w.Stats().Unchanged
	if err := w.Scan(self); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Unchanged != before {
		t.Errorf("a rescan after a new mapping stopped at the maps")
	}
}

// waitStableMaps waits until pid's maps text stops changing (its loader
// is done).
func waitStableMaps(t *testing.T, pid int) {
	t.Helper()
	var last []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, last) {
			return
		}
		last = b
	}
	t.Fatal("maps kept changing")
}
