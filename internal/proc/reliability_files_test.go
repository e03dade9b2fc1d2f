package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// writeELFStubs writes each path as a file starting with the ELF magic:
// enough for the tracker to open and share it.
func writeELFStubs(t *testing.T, paths ...string) {
	t.Helper()
	for _, f := range paths {
		if err := os.WriteFile(f, []byte("\x7fELF"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeProc writes a /proc/PID directory whose maps name real files under
// root, so the tracker opens them through the "root" fallback.
func fakeProc(t *testing.T, procRoot string, pid int, files ...string) {
	t.Helper()
	dir := filepath.Join(procRoot, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	var maps string
	for i, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		ino := st.Sys().(*syscall.Stat_t).Ino
		start := uint64(0x400000 + i*0x10000)
		maps += fmt.Sprintf("%x-%x r-xp 00000000 fe:01 %d %s\n", start, start+0x1000, ino, f)
		link := filepath.Join(dir, "root", f)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(f, link); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReliabilityChurnSharesFiles: thousands of processes of the same two
// files hold two handles, not one per process and mapping, and the
// handles close once the last process is forgotten.
func TestReliabilityChurnSharesFiles(t *testing.T) {
	tmp := t.TempDir()
	exe, lib := filepath.Join(tmp, "exe"), filepath.Join(tmp, "lib.so")
	writeELFStubs(t, exe, lib)
	root := filepath.Join(tmp, "proc")
	const n = 1000
	for pid := 1; pid <= n; pid++ {
		fakeProc(t, root, pid, exe, lib)
	}
	before := countFDs(t)
	tr := NewTracker(root, nil)
	for pid := 1; pid <= n; pid++ {
		p := tr.Get(uint32(pid))
		if p.Exited || len(p.Files) != 2 {
			t.Fatalf("pid %d: %+v", pid, p)
		}
		tr.Exit(uint32(pid), time.Now())
	}
	if got := tr.OpenFiles(); got != 2 {
		t.Fatalf("%d shared handles for %d processes of 2 files, want 2", got, n)
	}
	if d := countFDs(t) - before; d > 10 {
		t.Fatalf("%d descriptors open for %d processes of 2 files", d, n)
	}
	// A file must stay readable through any process until the last one
	// mapping it is forgotten.
	p := tr.Get(n)
	if _, err := os.ReadFile(p.OpenPath(&p.Mappings[0])); err != nil {
		t.Fatalf("shared handle not readable: %v", err)
	}
	tr.ForgetExited(time.Now())
	if got := tr.OpenFiles(); got != 0 {
		t.Fatalf("%d handles left after every process was forgotten", got)
	}
	if d := countFDs(t) - before; d > 2 {
		t.Fatalf("%d descriptors leaked", d)
	}
}

// TestReliabilityExecReleasesFiles: an exec reads the new image at once
// and keeps the old one while a kept sample holds it (Hold), until its
// Release drops its handles; a second report of the same exec changes
// nothing.
func TestReliabilityExecReleasesFiles(t *testing.T) {
	tmp := t.TempDir()
	exe := filepath.Join(tmp, "exe")
	os.WriteFile(exe, []byte("x"), 0o755)
	exe2 := filepath.Join(tmp, "exe2")
	os.WriteFile(exe2, []byte("y"), 0o755)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 7, exe)
	fakeProc(t, root, 8, exe)
	tr := NewTracker(root, nil)
	defer tr.Close()
	tr.Get(7)
	held := tr.Get(8)
	if !tr.Hold(held) { // a sample of pid 8 is kept for the next report
		t.Fatal("pid 8 could not be held")
	}
	at := time.Now()
	fakeProc(t, root, 7, exe2) // pid 7 execs exe2
	tr.Exec(7, at, nil)
	if got := tr.OpenFiles(); got != 2 {
		t.Fatalf("%d handles, want 2 (pid 8 maps exe, pid 7 exe2)", got)
	}
	if p := tr.Get(7); p.Exited || len(p.Mappings) != 1 || p.Mappings[0].Path != exe2 {
		t.Fatalf("pid 7 after exec: %+v, want exe2 read", p)
	}
	tr.Exec(7, at, nil) // the same exec reported again: already read after it
	if got := tr.OpenFiles(); got != 2 {
		t.Fatalf("%d handles after a repeated exec report, want 2", got)
	}
	fakeProc(t, root, 8, exe2)
	tr.Exec(8, time.Now(), nil)
	if got := tr.OpenFiles(); got != 2 {
		t.Fatalf("%d handles after both execs, want 2 (exe2 shared, exe kept as the image pid 8's sample holds)", got)
	}
	tr.ForgetExited(time.Now())
	if got := tr.OpenFiles(); got != 2 {
		t.Fatalf("%d handles after a report while the sample is held, want 2", got)
	}
	tr.Release(held.Gen()) // the sample was symbolized
	if got := tr.OpenFiles(); got != 1 {
		t.Fatalf("%d handles once the sample released its image, want 1 (exe2 shared)", got)
	}
}

// TestReliabilityProcessExitsMidRead: a process that exits while it is
// being read yields an exited entry, never a panic or a half-filled one
// that looks alive.
func TestReliabilityProcessExitsMidRead(t *testing.T) {
	tr := NewTracker("/proc", nil)
	defer tr.Close()
	for i := 0; i < 200; i++ {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot start /bin/true: %v", err)
		}
		pid := uint32(cmd.Process.Pid)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		p := tr.Get(pid)
		if !p.Exited && len(p.Mappings) == 0 {
			t.Fatalf("pid %d read as alive without mappings", pid)
		}
		<-done
		tr.Exit(pid, time.Now())
		tr.ForgetExited(time.Now())
	}
	if got := tr.OpenFiles(); got != 0 {
		t.Fatalf("%d handles left after all processes exited and were forgotten", got)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}
