package proc

import (
	"path/filepath"
	"testing"
	"time"
)

// TestRereadAfterExec: a process read at its exec, before its loader
// mapped a library, is read again once on request whatever its age, and
// finds the library; after that, and for an image no longer the pid's
// entry, the request changes nothing.
func TestRereadAfterExec(t *testing.T) {
	tmp := t.TempDir()
	exe, lib := filepath.Join(tmp, "exe"), filepath.Join(tmp, "libc.so.6")
	writeELFStubs(t, exe, lib)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 7, exe)
	tr := NewTracker(root, nil)
	defer tr.Close()

	if p := tr.Get(7); p.ExecRead() {
		t.Fatal("a process first read without an exec counts as read at its exec")
	}
	tr.Exec(7, time.Now(), nil)
	atExec := tr.Get(7)
	if !atExec.ExecRead() {
		t.Fatal("the process read at its exec does not say so")
	}
	libAddr := uint64(0x400000 + 0x10000) // fakeProc's place for the second file
	fakeProc(t, root, 7, exe, lib)        // the loader maps the library
	p := tr.RereadAfterExec(atExec)
	if m := p.Find(libAddr); m == nil || m.Path != lib {
		t.Fatalf("after the re-read: mapping %+v, want %s", m, lib)
	}
	if p.ExecRead() || atExec.Find(libAddr) != nil {
		t.Fatal("the re-read process still counts as read at its exec, or the earlier *Process changed")
	}
	if again := tr.RereadAfterExec(p); again != p {
		t.Fatal("a second request read the process again")
	}
	if stale := tr.RereadAfterExec(atExec); stale != atExec {
		t.Fatal("a request for an image no longer the entry read the process")
	}
}

// TestExecReadWhenReadFirst: a process first read after its exec, for a
// sample handled before the exec's report, is the new image read at its
// exec too.
func TestExecReadWhenReadFirst(t *testing.T) {
	tmp := t.TempDir()
	exe := filepath.Join(tmp, "exe")
	writeELFStubs(t, exe)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 7, exe)
	tr := NewTracker(root, nil)
	defer tr.Close()
	at := time.Now()
	first := tr.Get(7) // read after the exec at `at`
	tr.Exec(7, at, nil)
	p := tr.Get(7)
	if !p.ExecRead() || first.ExecRead() {
		t.Fatalf("entry read at exec %v (want true), the *Process handed out before %v (want it unchanged)", p.ExecRead(), first.ExecRead())
	}
	if len(p.Mappings) != 1 || p.Find(0x400000) == nil {
		t.Fatal("the report of the exec lost the mappings read before it")
	}
}
