package proc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBeforeExec: a sample taken inside an exec is placed in the image the
// process was read with before the exec, also once the reader read the
// exec (the sample precedes the exec in the stream, so it is handled
// before the exec is applied); a process not read before (a fresh vfork
// child), or read only after the sample, takes its parent's image.
func TestBeforeExec(t *testing.T) {
	tmp := t.TempDir()
	old, exe, parent := filepath.Join(tmp, "old"), filepath.Join(tmp, "new"), filepath.Join(tmp, "parent")
	writeELFStubs(t, old, exe, parent)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 7, old)
	fakeProc(t, root, 8, parent)
	tr := NewTracker(root, nil)
	defer tr.Close()
	tr.Get(7)
	tr.Get(8)
	inExec := time.Now() // the sample, inside pid 7's exec
	time.Sleep(time.Millisecond)

	exePath := func(p *Process) string {
		if p == nil || len(p.Mappings) == 0 {
			return "<nil>"
		}
		return p.Mappings[0].Path
	}
	if got := exePath(tr.Before(7, 8, inExec, 0x400000)); got != old {
		t.Errorf("before the exec event: image %s, want %s", got, old)
	}
	fakeProc(t, root, 7, exe)
	execAt := time.Now()
	read := tr.ReadExec(7, execAt, nil) // the reader, as it decodes the exec
	if got := exePath(tr.Before(7, 8, inExec, 0x400000)); got != old {
		t.Errorf("after the exec was read: image %s, want %s (the one the exec replaces)", got, old)
	}
	// A held image stays readable after the exec replaced it (below).
	img := tr.Before(7, 8, inExec, 0x400000)
	if !tr.Hold(img) {
		t.Fatal("the pid's entry could not be held")
	}
	tr.ApplyExec(7, execAt, read) // the consumer, after the sample
	if got := exePath(tr.Get(7)); got != exe {
		t.Fatalf("after the exec: %s, want %s", got, exe)
	}
	if got := exePath(tr.Before(9, 8, inExec, 0x400000)); got != parent {
		t.Errorf("process never read: image %s, want the parent's %s", got, parent)
	}
	fakeProc(t, root, 10, exe)
	tr.Get(10) // read after the sample: maybe the new image already
	if got := exePath(tr.Before(10, 8, inExec, 0x400000)); got != parent {
		t.Errorf("process read after the sample: image %s, want the parent's %s", got, parent)
	}
	if p := tr.Before(11, 12, inExec, 0x400000); p != nil {
		t.Errorf("neither process nor parent known: %+v", p)
	}

	// A parent read before its loader mapped libc is read again for an
	// address it lacks (at most once per parentRefreshAge).
	lib := filepath.Join(tmp, "libc.so")
	writeELFStubs(t, lib)
	fakeProc(t, root, 8, parent, lib)
	libAddr := uint64(0x400000 + 0x10000) // fakeProc's place for the second file
	time.Sleep(parentRefreshAge)
	if p := tr.Before(9, 8, inExec, libAddr); p == nil || p.Find(libAddr) == nil || p.Find(libAddr).Path != lib {
		t.Errorf("parent's library not found by a re-read: %+v", p)
	}

	tr.ForgetExited(time.Now())
	tr.ForgetExited(time.Now()) // the image before pid 7's exec goes
	if p := tr.Before(7, 0, inExec, 0x400000); p != nil {
		t.Errorf("image before the exec still kept after two reports: %s", exePath(p))
	}
	held, current := tr.Image(img.Gen())
	if held == nil || current {
		t.Fatalf("held image after the exec: %v (current %v), want the image the exec replaced", held, current)
	}
	if _, err := os.ReadFile(held.OpenPath(&held.Mappings[0])); err != nil {
		t.Fatalf("held image's file: %v", err)
	}
	if _, ok := held.Files[held.Mappings[0].Start]; !ok {
		t.Fatal("held image holds no handle")
	}
	n := tr.OpenFiles()
	tr.Release(img.Gen())
	if got := tr.OpenFiles(); got != n-1 {
		t.Fatalf("%d handles after Release, want %d (the old executable's closed)", got, n-1)
	}
	if p, _ := tr.Image(img.Gen()); p != nil {
		t.Errorf("released image still returned: %+v", p)
	}
}

// TestBeforeExecOfAFork: a fork's entry is a copy of its parent's as the
// tracker had it at the fork. A sample inside the child's exec at an
// address that copy lacks (the parent was read before its loader mapped
// libc, whose execve the child calls) is placed in the parent, read again;
// one at an address the copy has is placed in the copy.
func TestBeforeExecOfAFork(t *testing.T) {
	tmp := t.TempDir()
	parent, lib := filepath.Join(tmp, "parent"), filepath.Join(tmp, "libc.so")
	writeELFStubs(t, parent, lib)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 8, parent)
	tr := NewTracker(root, nil)
	defer tr.Close()
	tr.Get(8) // before its loader mapped libc
	tr.Fork(9, 8, time.Now())
	time.Sleep(time.Millisecond)
	inExec := time.Now()
	if p := tr.Before(9, 8, inExec, 0x400000); p == nil || p.PID != 9 {
		t.Errorf("an address the fork's copy has: placed in %+v, want the copy (pid 9)", p)
	}
	fakeProc(t, root, 8, parent, lib)
	libAddr := uint64(0x400000 + 0x10000) // fakeProc's place for the second file
	time.Sleep(parentRefreshAge)
	p := tr.Before(9, 8, inExec, libAddr)
	if p == nil || p.PID != 8 || p.Find(libAddr) == nil || p.Find(libAddr).Path != lib {
		t.Errorf("an address the fork's copy lacks: placed in %+v, want the parent read again, with libc", p)
	}
}
