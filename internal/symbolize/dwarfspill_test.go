package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSpillFile inflates a debug file's DWARF into a spill file and reads
// every section back, whole and in part; a truncated or foreign file is
// refused, and the directory is kept within its bound by removing the
// least recently used files.
func TestSpillFile(t *testing.T) {
	ef, err := elf.Open(fixture("inline-gcc.debug"))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	dir := t.TempDir()
	path, err := writeSpill(ef, dir, "a.dwarf", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	src, err := openSpill(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ef.Sections {
		name, ok := dwarfSectionOf(s)
		if !ok {
			continue
		}
		want, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.read(name, 0, src.size(name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
		}
		if len(want) > 10 {
			if part, err := src.read(name, 3, 7); err != nil || !bytes.Equal(part, want[3:10]) {
				t.Errorf("%s: bytes 3..10 = %x, %v; want %x", name, part, err, want[3:10])
			}
		}
		if _, err := src.read(name, len(want)-1, 2); err == nil {
			t.Errorf("%s: read past the end without error", name)
		}
		n++
	}
	src.close()
	if n < 4 {
		t.Errorf("only %d sections spilled", n)
	}
	raw, _ := os.ReadFile(path)
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"truncated", raw[:len(raw)-10]},
		{"not a spill file", []byte("\x7fELF")},
	} {
		p := filepath.Join(dir, tt.name)
		if err := os.WriteFile(p, tt.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := openSpill(p); err == nil {
			s.close()
			t.Errorf("%s: opened without error", tt.name)
		}
	}
	// A bound below two files' size keeps only the newest.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSpill(ef, dir, "b.dwarf", int64(len(raw))+100); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("oldest spill file kept over the bound")
	}
	if _, err := os.Stat(filepath.Join(dir, "b.dwarf")); err != nil {
		t.Errorf("newest spill file: %v", err)
	}
}
