package symbolize

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSpillFile writes sections to a spill file and reads them back; a
// truncated or foreign file is refused, and the directory is kept within
// its bound by removing the oldest files.
func TestSpillFile(t *testing.T) {
	dir := t.TempDir()
	secs := &sections{m: map[string][]byte{
		"info": bytes.Repeat([]byte{1, 2, 3}, 1000), "abbrev": {4, 5}, "str": {},
	}}
	if err := writeSpill(dir, "a.dwarf", secs, 1<<20); err != nil {
		t.Fatal(err)
	}
	got, err := readSpill(filepath.Join(dir, "a.dwarf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.m) != len(secs.m) || got.bytes != 3002 {
		t.Fatalf("read %d sections, %d bytes; want 3, 3002", len(got.m), got.bytes)
	}
	for n, b := range secs.m {
		if !bytes.Equal(got.m[n], b) {
			t.Errorf("section %s differs", n)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "a.dwarf"))
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
		if _, err := readSpill(p); err == nil {
			t.Errorf("%s: read without error", tt.name)
		}
	}
	// A bound below two files' size keeps only the newest.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "a.dwarf"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := writeSpill(dir, "b.dwarf", secs, int64(len(raw))+100); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.dwarf")); err == nil {
		t.Error("oldest spill file kept over the bound")
	}
	if _, err := os.Stat(filepath.Join(dir, "b.dwarf")); err != nil {
		t.Errorf("newest spill file: %v", err)
	}
}
