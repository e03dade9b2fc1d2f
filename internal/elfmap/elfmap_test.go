package elfmap

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// sink keeps touch's reads from being optimized away.
var sink byte

// touch reads every page of d, as a lookup would, guarded.
func touch(d []byte) (ok bool) {
	defer Recover(Guard(), &ok)
	for i := 0; i < len(d); i += 4096 {
		sink ^= d[i]
	}
	return true
}

// TestMapReadsAndSurvivesTruncation maps a section of a copy of this test
// binary, checks the mapped bytes against the section's, and then
// truncates the file under the mapping: the guarded read answers false
// and counts the fault instead of crashing on SIGBUS.
func TestMapReadsAndSurvivesTruncation(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".text")
	want, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := Map(s)
	f.Close()
	if !ok {
		t.Fatal("a section of a file on disk was not mapped")
	}
	if !bytes.Equal(m.Data, want) || !touch(m.Data) {
		t.Fatal("mapped bytes differ from the section's")
	}
	m.DropPages()
	if !bytes.Equal(m.Data, want) {
		t.Fatal("mapped bytes differ after DropPages")
	}
	if mem, err := elf.NewFile(bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	} else if _, ok := Map(mem.Section(".text")); ok {
		t.Error("a section of a file in memory was mapped")
	}

	before := Faults()
	m.DropPages()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if touch(m.Data) {
		t.Error("read past the end of a truncated file answered ok")
	}
	if Faults() != before+1 {
		t.Errorf("faults %d, want %d", Faults(), before+1)
	}
}

// TestMappedBytesCountsUntilUnmapped maps a section and checks that
// MappedBytes grows by at least its size, then falls by as much once the
// Section is unreachable and its cleanup unmapped it.
func TestMappedBytesCountsUntilUnmapped(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	before := MappedBytes()
	m, ok := Map(s)
	if !ok {
		t.Fatal("a section of a file on disk was not mapped")
	}
	peak := MappedBytes()
	if got := peak - before; got < int64(s.FileSize) {
		t.Fatalf("mapped bytes grew by %d, want at least the section's %d", got, s.FileSize)
	}
	runtime.KeepAlive(m)
	m = nil
	for range 50 {
		runtime.GC()
		// Other tests' mappings may go meanwhile: this one's must.
		if MappedBytes() <= peak-int64(s.FileSize) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("mapped bytes %d after the section was collected, want at most %d", MappedBytes(), peak-int64(s.FileSize))
}
