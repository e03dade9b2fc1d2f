package proc

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSnapshot: the tracker's read of a process hands the scanner what
// reading /proc again would give, once.
func TestSnapshot(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"A=1", "OTEL_RESOURCE_ATTRIBUTES=service.name=b", "OTEL_SERVICE_NAMEX=no", "OTEL_SERVICE_NAME=svc", "Z=2"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := uint32(cmd.Process.Pid)
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	// sleep has mapped its libraries once its maps stop changing.
	var maps []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(dir + "/maps")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, maps) && bytes.Contains(b, []byte("libc")) || time.Now().After(deadline) {
			break
		}
		maps = b
	}
	tr := NewTracker("/proc", nil)
	defer tr.Close()
	s := tr.Snapshot(pid) // never seen: read now, for both
	if s == nil {
		t.Fatal("no snapshot of a process read now")
	}
	if tr.Len() != 1 || tr.Get(pid).Exited {
		t.Fatalf("the tracker holds %d processes after the snapshot's read, want the live one", tr.Len())
	}
	if !bytes.Equal(s.Maps, maps) {
		t.Errorf("snapshot maps:\n%s\nwant:\n%s", s.Maps, maps)
	}
	if want := "OTEL_RESOURCE_ATTRIBUTES=service.name=b\x00OTEL_SERVICE_NAME=svc\x00"; string(s.Environ) != want || s.EnvErr != nil {
		t.Errorf("snapshot environment %q (%v), want %q", s.Environ, s.EnvErr, want)
	}
	var exe unix.Stat_t
	if err := unix.Stat(dir+"/exe", &exe); err != nil {
		t.Fatal(err)
	}
	if s.ExeErr != nil || s.Exe.Dev != exe.Dev || s.Exe.Ino != exe.Ino || s.Exe.Size != exe.Size || s.Exe.Mtim != exe.Mtim {
		t.Errorf("snapshot executable %+v (%v), want %+v", s.Exe, s.ExeErr, exe)
	}
	if s.PID != pid || time.Since(s.At) > time.Minute {
		t.Errorf("snapshot of pid %d at %v", s.PID, s.At)
	}
	if again := tr.Snapshot(pid); again != nil {
		t.Errorf("the snapshot was handed over twice")
	}
	// A re-read (an exec) makes a new one.
	tr.Exec(pid, time.Now(), nil)
	if s2 := tr.Snapshot(pid); s2 == nil || !bytes.Equal(s2.Maps, maps) {
		t.Errorf("no snapshot of the read after an exec")
	}
}

// TestSnapshotsExpire: a snapshot older than snapshotTTL is not handed
// over (the process may have mapped more since) and is dropped.
func TestSnapshotsExpire(t *testing.T) {
	var ss snapshots
	t0 := time.Now()
	ss.put(&Snapshot{PID: 1, At: t0})
	ss.put(&Snapshot{PID: 2, At: t0.Add(snapshotTTL / 2)})
	ss.put(&Snapshot{PID: 1, At: t0.Add(snapshotTTL / 2)}) // 1 read again
	if s := ss.take(1, t0.Add(snapshotTTL+time.Millisecond)); s == nil || s.At != t0.Add(snapshotTTL/2) {
		t.Fatalf("take(1) = %+v, want the second read of pid 1", s)
	}
	if s := ss.take(2, t0.Add(snapshotTTL*3/2+time.Millisecond)); s != nil {
		t.Errorf("take(2) = %+v after its TTL, want nil", s)
	}
	if len(ss.byPID) != 0 || len(ss.fifo) != 0 {
		t.Errorf("kept %d snapshots (%d queued) once all expired or were taken", len(ss.byPID), len(ss.fifo))
	}
}
