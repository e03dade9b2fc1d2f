package symbolize

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestELFSymbols(t *testing.T) {
	funcs := []string{"leaf", "leaf_stack", "leaf_nofp", "a", "b", "c", "d", "main", "sized_stub"}
	for _, bin := range []string{"chain-gcc", "chain-clang", "chain-gcc-nobuildid"} {
		t.Run(bin, func(t *testing.T) {
			path := fixture(bin)
			truth := nmSymbols(t, path)
			obj, err := New(nil, Options{}).Open(path, path)
			if err != nil {
				t.Fatal(err)
			}
			for _, fn := range funcs {
				addr, ok := truth[fn]
				if !ok {
					t.Fatalf("nm has no %s", fn)
				}
				probes := []uint64{addr, addr + 1}
				if fn == "sized_stub" { // one byte long
					probes = probes[:1]
				}
				for _, a := range probes {
					s, ok := obj.Lookup(a)
					if !ok || s.Function != fn {
						t.Errorf("Lookup(%#x) = %q, %v; want %s", a, s.Function, ok, fn)
					}
				}
			}
			// Inside the body, not only at the entry.
			if s, _ := obj.Lookup(truth["leaf"] + 4); s.Function != "leaf" {
				t.Errorf("Lookup(leaf+4) = %q", s.Function)
			}
			mangled := truth["_ZN8spanprof4test5widenEi"]
			if s, _ := obj.Lookup(mangled); s.Function != "spanprof::test::widen(int)" {
				t.Errorf("demangled name = %q", s.Function)
			}
			// sized_stub is 1 byte long: the bytes after it have no name.
			if s, ok := obj.Lookup(truth["sized_stub"] + 8); ok {
				t.Errorf("Lookup(sized_stub+8) = %q, want no symbol", s.Function)
			}
			if s, ok := obj.Lookup(1); ok {
				t.Errorf("Lookup(1) = %q, want no symbol", s.Function)
			}
		})
	}
}

func TestStrippedUsesDebugFile(t *testing.T) {
	stripped := fixture("chain-gcc-stripped")
	truth := nmSymbols(t, fixture("chain-gcc"))
	obj, err := New(nil, Options{DebugDirs: []string{}}).Open(stripped, stripped)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := obj.Lookup(truth["leaf"]); ok {
		t.Errorf("stripped Lookup(leaf) = %q, want no symbol", s.Function)
	}

	// The unstripped binary has the same build ID, so it serves as the
	// separate debug file under .build-id/.
	dir := t.TempDir()
	id := readelfBuildID(t, stripped)
	dbg := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(fixture("chain-gcc"))
	if err := os.Symlink(abs, dbg); err != nil {
		t.Fatal(err)
	}
	obj, err = New(nil, Options{DebugDirs: []string{dir}}).Open(stripped, stripped)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := obj.Lookup(truth["leaf"]); !ok || s.Function != "leaf" {
		t.Errorf("with debug file Lookup(leaf) = %q, %v", s.Function, ok)
	}
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		bin         string
		wantBuildID bool
	}{
		{"chain-gcc", true},
		{"chain-clang", true},
		{"chain-gcc-stripped", true},
		{"goprog-sw", true},
		{"chain-gcc-nobuildid", false},
	}
	for _, tt := range tests {
		t.Run(tt.bin, func(t *testing.T) {
			path := fixture(tt.bin)
			id, err := Identify(path)
			if err != nil {
				t.Fatal(err)
			}
			if want := readelfBuildID(t, path); id.BuildID != want {
				t.Errorf("BuildID = %q, readelf says %q", id.BuildID, want)
			}
			if tt.wantBuildID == (id.BuildID == "") {
				t.Errorf("BuildID = %q, want present=%v", id.BuildID, tt.wantBuildID)
			}
			if tt.wantBuildID {
				if id.HTLHash != "" {
					t.Errorf("HTLHash = %q alongside a build ID", id.HTLHash)
				}
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			h.Write(data[:4096])
			h.Write(data[len(data)-4096:])
			binary.Write(h, binary.LittleEndian, uint64(len(data)))
			if want := hex.EncodeToString(h.Sum(nil)[:16]); id.HTLHash != want {
				t.Errorf("HTLHash = %s, want %s", id.HTLHash, want)
			}
		})
	}
}

func TestVirtualAddress(t *testing.T) {
	// libc-like layout: r-- at 0, r-x at file 0x26000 / vaddr 0x26000, and a
	// prelinked-style segment whose vaddr differs from its offset.
	progs := []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Off: 0, Vaddr: 0, Filesz: 0x25388}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Off: 0x26000, Vaddr: 0x26000, Filesz: 0x1550fc}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Off: 0x1cf8d0, Vaddr: 0x1d08d0, Filesz: 0x4f98}},
	}
	tests := []struct {
		name   string
		m      Mapping
		addr   uint64
		want   uint64
		wantOK bool
	}{
		{"text of shared library", Mapping{Start: 0x7f0000026000, Limit: 0x7f000017c000, Offset: 0x26000}, 0x7f0000031234, 0x31234, true},
		{"segment with vaddr != offset", Mapping{Start: 0x7f00001cf000, Limit: 0x7f00001d5000, Offset: 0x1cf000}, 0x7f00001cf900, 0x1d0900, true},
		{"non-PIE executable", Mapping{Start: 0x26000, Limit: 0x17c000, Offset: 0x26000}, 0x30000, 0x30000, true},
		{"below mapping", Mapping{Start: 0x7f0000026000, Limit: 0x7f000017c000, Offset: 0x26000}, 0x7f0000025000, 0, false},
		{"past mapping", Mapping{Start: 0x7f0000026000, Limit: 0x7f000017c000, Offset: 0x26000}, 0x7f000017c000, 0, false},
		{"gap between segments", Mapping{Start: 0x1000, Limit: 0x100000, Offset: 0}, 0x26800, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := VirtualAddress(progs, tt.m, tt.addr)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("VirtualAddress(%#x) = %#x, %v; want %#x, %v", tt.addr, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestCache(t *testing.T) {
	gcc, clang := fixture("chain-gcc"), fixture("chain-clang")
	s := New(nil, Options{MaxObjects: 1})
	o1, err := s.Open(gcc, gcc)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := s.Open(gcc, "/other/path/same/file")
	if err != nil {
		t.Fatal(err)
	}
	if o1 != o2 {
		t.Error("same file opened twice was parsed twice")
	}
	if _, err := s.Open(clang, clang); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Errorf("cache holds %d objects, bound is 1", s.Len())
	}
	o3, err := s.Open(gcc, gcc)
	if err != nil {
		t.Fatal(err)
	}
	if o3 == o1 {
		t.Error("evicted object was still returned")
	}
	if _, err := s.Open(filepath.Join(t.TempDir(), "missing"), "missing"); err == nil {
		t.Error("Open of a missing file succeeded")
	}
}

// TestLibc resolves exported libc functions with and without the separate
// debug file (libc6-dbg, when installed). Among aliases at one address the
// name with the fewest leading underscores wins (nanosleep, not
// __nanosleep or the debug file's __GI___nanosleep).
func TestLibc(t *testing.T) {
	if _, err := os.Stat(libc); err != nil {
		t.Skipf("no %s", libc)
	}
	truth := nmSymbolsDyn(t, libc)
	for _, dirs := range [][]string{{}, nil} {
		obj, err := New(nil, Options{DebugDirs: dirs}).Open(libc, libc)
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{"clock_nanosleep", "nanosleep", "malloc", "printf", "pthread_create", "read"} {
			if s, ok := obj.Lookup(truth[fn] + 2); !ok || s.Function != fn {
				t.Errorf("debugDirs=%v: Lookup(%s+2) = %q, %v", dirs, fn, s.Function, ok)
			}
		}
	}
}

// TestCodeLabels names code under symbols written in assembly without a
// type or size (the loader's _start and _dl_start_user), and keeps a label
// inside a C function from splitting it.
func TestCodeLabels(t *testing.T) {
	path := fixture("label")
	truth := nmSymbols(t, path)
	obj, err := New(nil, Options{}).Open(path, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		addr uint64
		want string
	}{
		{"typeless entry", truth["label_entry"] + 2, "label_entry"},
		{"local typeless label", truth["label_entry_user"], "label_entry_user"},
		{"label inside a function", truth["label_inside"] + 1, "label_work"},
		{"function before the label", truth["label_work"] + 1, "label_work"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if s, ok := obj.Lookup(tt.addr); !ok || s.Function != tt.want {
				t.Errorf("Lookup(%#x) = %q, %v; want %s", tt.addr, s.Function, ok, tt.want)
			}
		})
	}
}
