package proc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// imageOf reads what the kernel reports at an exec from a live process:
// its auxiliary vector and the file it runs.
func imageOf(t *testing.T, pid int) *Image {
	t.Helper()
	auxv, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		t.Skipf("auxv: %v", err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Skipf("exe: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	img := &Image{Path: exe, Inode: st.Ino, Dev: fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))}
	for i := 0; i+16 <= len(auxv); i += 16 {
		key, val := binary.LittleEndian.Uint64(auxv[i:]), binary.LittleEndian.Uint64(auxv[i+8:])
		switch key {
		case 7:
			img.InterpBase = val
		case 9:
			img.Entry = val
		}
	}
	// The loader's file, as the kernel finds it at AT_BASE.
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var start, end, off, inode uint64
		var perms, dev string
		if n, _ := fmt.Sscanf(sc.Text(), "%x-%x %s %x %s %d", &start, &end, &perms, &off, &dev, &inode); n == 6 && start == img.InterpBase {
			img.InterpDev, img.InterpInode = dev, inode
		}
	}
	return img
}

// TestSynthesizeMatchesMaps places a running PIE executable and its loader
// from its exec image alone, as for a process gone before procfs could be
// read, and checks the code mappings against the process's own maps.
func TestSynthesizeMatchesMaps(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	// Wait until the loader has mapped the libraries.
	var want []Mapping
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			t.Fatal(err)
		}
		want, err = ParseMaps(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(want) >= 3 {
			break
		}
	}
	img := imageOf(t, pid)
	if img.InterpBase == 0 {
		t.Skip("sleep is statically linked here")
	}

	tr := NewTracker("/nonexistent", nil) // procfs unreadable: the process counts as gone
	defer tr.Close()
	tr.Exec(uint32(pid), time.Now(), img)
	p := tr.Get(uint32(pid))
	if tr.Stats().Synthesized != 1 || len(p.Mappings) == 0 {
		t.Fatalf("not placed from the exec image: %+v", p)
	}
	real := map[string]Mapping{}
	for _, m := range want {
		real[filepath.Base(m.Path)] = m
	}
	for _, m := range p.Mappings {
		r, ok := real[filepath.Base(m.Path)]
		if !ok {
			t.Errorf("placed %s, which the process does not map", m.Path)
			continue
		}
		if m.Start != r.Start || m.End != r.End || m.Offset != r.Offset || m.Inode != r.Inode {
			t.Errorf("%s placed at %#x-%#x offset %#x inode %d, maps says %#x-%#x offset %#x inode %d",
				m.Path, m.Start, m.End, m.Offset, m.Inode, r.Start, r.End, r.Offset, r.Inode)
		}
		if p.Files[m.Start] == nil {
			t.Errorf("%s: no open file", m.Path)
		}
		t.Logf("%s %#x-%#x offset %#x", filepath.Base(m.Path), m.Start, m.End, m.Offset)
	}
	if len(p.Mappings) != 2 {
		t.Errorf("placed %d code mappings, want the executable's and the loader's", len(p.Mappings))
	}
	if a := p.Find(img.Entry); a == nil || a.Path != img.Path {
		t.Errorf("the entry point %#x is not in the executable's mapping", img.Entry)
	}

	// A second short-lived process of the same executable is placed alike
	// from the headers parsed for the first.
	tr.mu.Lock()
	hdr := tr.files[fileKey{dev: img.Dev, inode: img.Inode}].hdr
	tr.mu.Unlock()
	tr.Exec(uint32(pid)+1, time.Now(), img)
	p1 := tr.Get(uint32(pid) + 1)
	tr.mu.Lock()
	again := tr.files[fileKey{dev: img.Dev, inode: img.Inode}].hdr
	tr.mu.Unlock()
	if hdr == nil || again != hdr {
		t.Errorf("the executable's headers were parsed again for the second process")
	}
	if fmt.Sprint(p1.Mappings) != fmt.Sprint(p.Mappings) {
		t.Errorf("second process placed %+v, first %+v", p1.Mappings, p.Mappings)
	}

	// A loader path naming another file than the one mapped (a
	// container's loader seen from the host) is not placed.
	other := *img
	other.InterpInode++
	tr2 := NewTracker("/nonexistent", nil)
	defer tr2.Close()
	tr2.Exec(uint32(pid), time.Now(), &other)
	if p2 := tr2.Get(uint32(pid)); len(p2.Mappings) != 1 || p2.Mappings[0].Path != img.Path {
		t.Errorf("with the loader's inode wrong, placed %+v; want the executable alone", p2.Mappings)
	}
}
