package proc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRefreshAddsLaterMappings: a library mapped after the first read is
// found by Refresh, which keeps what was read before and leaves the
// *Process handed out earlier as it was; a process read too recently is
// not re-read, and a process gone since keeps its mappings.
func TestRefreshAddsLaterMappings(t *testing.T) {
	tmp := t.TempDir()
	exe, lib := filepath.Join(tmp, "exe"), filepath.Join(tmp, "plugin.so")
	writeELFStubs(t, exe, lib)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 7, exe)
	tr := NewTracker(root, nil)
	defer tr.Close()
	first := tr.Get(7)
	if len(first.Mappings) != 1 {
		t.Fatalf("first read: %d mappings, want 1", len(first.Mappings))
	}
	libAddr := uint64(0x400000 + 0x10000) // fakeProc's place for the second file
	if first.Find(libAddr) != nil {
		t.Fatal("library found before it was mapped")
	}

	fakeProc(t, root, 7, exe, lib) // the process loads the plugin
	if p := tr.Refresh(7, time.Hour); p != first {
		t.Fatal("a process read less than minAge ago was re-read")
	}
	p := tr.Refresh(7, 0)
	m := p.Find(libAddr)
	if m == nil || m.Path != lib {
		t.Fatalf("after refresh: mapping %+v, want %s", m, lib)
	}
	if _, ok := p.Files[m.Start]; !ok {
		t.Fatal("the new mapping's file was not opened")
	}
	if p.Find(0x400000) == nil || len(first.Mappings) != 1 || first.Find(libAddr) != nil {
		t.Fatal("refresh lost the executable or changed the earlier *Process")
	}
	if got := tr.Refreshed(); got != 1 {
		t.Fatalf("Refreshed() = %d, want 1", got)
	}
	// Both handles, held once each (one file per inode).
	if n := tr.OpenFiles(); n != 2 {
		t.Fatalf("%d files held, want 2", n)
	}

	if err := os.RemoveAll(filepath.Join(root, "7")); err != nil {
		t.Fatal(err)
	}
	gone := tr.Refresh(7, 0)
	if !gone.Exited || gone.Find(libAddr) == nil {
		t.Fatalf("process gone since: exited %v, library mapping kept %v", gone.Exited, gone.Find(libAddr) != nil)
	}
	tr.ForgetExited(time.Now())
	if n := tr.OpenFiles(); n != 0 {
		t.Fatalf("%d files still held after the process was forgotten", n)
	}
}

// TestExitingProcessReadAsExited: a process read while in do_exit (its
// exit may already have been reported, before the read) is marked exited
// with its mappings, so the tracker forgets it after the next report
// instead of keeping it as live forever.
func TestExitingProcessReadAsExited(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want bool
	}{
		{"42 (svc) S 1 42 42 0 -1 4194560 0 0 0 0", false},
		{"42 (svc) S 1 42 42 0 -1 4194564 0 0 0 0", true}, // PF_EXITING
		{"42 (a) b) (c) Z 1 42 42 0 -1 4194304 0", true},  // zombie; comm with ") ("
		{"42 (svc) R 1", false},                           // truncated
	} {
		if got := parseStat([]byte(tc.stat)).exiting; got != tc.want {
			t.Errorf("parseStat(%q).exiting = %v, want %v", tc.stat, got, tc.want)
		}
	}
	tmp := t.TempDir()
	exe := filepath.Join(tmp, "exe")
	writeELFStubs(t, exe)
	root := filepath.Join(tmp, "proc")
	fakeProc(t, root, 9, exe)
	if err := os.WriteFile(filepath.Join(root, "9", "stat"), []byte("9 (exe) S 1 9 9 0 -1 4194564 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(root, nil)
	defer tr.Close()
	if p := tr.Get(9); !p.Exited || len(p.Mappings) != 1 {
		t.Fatalf("exiting process read as exited %v with %d mappings, want exited with 1", p.Exited, len(p.Mappings))
	}
	tr.ForgetExited(time.Now())
	if tr.Len() != 0 {
		t.Fatal("exiting process not forgotten after the report")
	}
}
