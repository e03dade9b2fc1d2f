package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fileMapping returns a mapping of the file at path as the kernel would
// capture it: its device and inode.
func fileMapping(t *testing.T, path string, start uint64) Mapping {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return Mapping{Start: start, End: start + 0x2000, Offset: 0x1000, Inode: st.Ino,
		Dev: fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)), Path: path}
}

// TestExitMaps adds the mappings captured at an exit to a process placed
// from its exec image, and checks which files are accepted.
func TestExitMaps(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfoo.so")
	held := filepath.Join(dir, "libheld.so")
	for _, p := range []string{lib, held} {
		if err := os.WriteFile(p, []byte("not really ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exe := Mapping{Start: 0x400000, End: 0x401000, Inode: 7, Dev: "fe:00", Path: "/usr/bin/demo"}
	libM := fileMapping(t, lib, 0x7f0000000000)
	heldM := fileMapping(t, held, 0x7f0000100000)
	heldM.Path = "lib/libheld.so" // a partial path: only the held handle can serve
	wrong := libM
	wrong.Start, wrong.End = 0x7f0000200000, 0x7f0000202000
	wrong.Inode = 1 << 40 // the path names another file now
	vdso := Mapping{Start: 0x7fff00000000, End: 0x7fff00002000, Dev: "00:00", Path: "[vdso]"}
	overlap := Mapping{Start: 0x400000, End: 0x402000, Inode: 8, Dev: "fe:00", Path: "/usr/bin/other"}

	tr := NewTracker("/nonexistent", nil)
	defer tr.Close()
	execAt := time.Now()
	tr.mu.Lock()
	tr.procs[10] = &Process{PID: 10, Mappings: []Mapping{exe}, Files: map[uint64]*os.File{}, execAt: execAt, Exited: true}
	hf, ok := tr.shared(fileKey{dev: heldM.Dev, inode: heldM.Inode}, held) // as another process's read would
	tr.mu.Unlock()
	if !ok {
		t.Fatal("could not hold the file")
	}
	before := tr.Get(10)

	tr.ExitMaps(10, execAt.Add(-time.Millisecond), "", []Mapping{libM})
	if p := tr.Get(10); len(p.Mappings) != 1 {
		t.Fatalf("a capture older than the exec was applied: %+v", p.Mappings)
	}
	tr.ExitMaps(99, execAt, "", []Mapping{libM}) // never seen: nothing to add to
	if tr.Len() != 1 {
		t.Fatalf("a capture of an unknown process made an entry")
	}

	tr.ExitMaps(10, execAt.Add(time.Millisecond), "/usr/bin/demo", []Mapping{overlap, libM, heldM, wrong, vdso})
	p := tr.Get(10)
	want := []Mapping{exe, libM, heldM, vdso}
	if len(p.Mappings) != len(want) {
		t.Fatalf("mappings %+v, want %+v", p.Mappings, want)
	}
	for i := range want {
		if p.Mappings[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, p.Mappings[i], want[i])
		}
	}
	if p.Files[libM.Start] == nil || p.Files[heldM.Start] != hf || p.Files[vdso.Start] != nil {
		t.Errorf("files %v: want the library opened by path and the held handle reused", p.Files)
	}
	if m := p.Find(0x7f0000000800); m == nil || m.Path != lib {
		t.Errorf("library address found in %+v", m)
	}
	if before.Find(0x7f0000000800) != nil || len(before.Mappings) != 1 {
		t.Error("the process handed out before the capture changed")
	}
	if st := tr.Stats().Exits; st != (ExitStats{Processes: 1, Mappings: 3, NoFile: 1}) {
		t.Errorf("stats %+v", st)
	}
	// The captured executable names a process read too late to know it.
	tr.mu.Lock()
	tr.procs[11] = &Process{PID: 11, Exited: true}
	tr.mu.Unlock()
	tr.ExitMaps(11, time.Now(), "/usr/bin/demo", []Mapping{vdso})
	if p := tr.Get(11); p.Exe != "/usr/bin/demo" || len(p.Mappings) != 1 {
		t.Errorf("process 11 after its capture: %+v", p)
	}
	tr.ForgetExited(time.Now())
	if n := tr.OpenFiles(); n != 1 {
		t.Errorf("%d files open after the processes were forgotten, want the held one", n)
	}
	tr.mu.Lock()
	tr.unref(hf)
	tr.mu.Unlock()
	if n := tr.OpenFiles(); n != 0 {
		t.Errorf("%d files open", n)
	}
}
