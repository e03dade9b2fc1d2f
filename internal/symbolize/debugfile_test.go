package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// copyFile copies src to dst, creating dst's directory.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, data)
}

func writeFile(t *testing.T, dst string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func buildIDPath(dir, id string) string {
	return filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
}

// TestSeparateDebugFiles symbolizes the stripped chain fixture from each
// place a debug file can be, and refuses every kind of bad debug file
// with a counted reason and no names (never a wrong one).
func TestSeparateDebugFiles(t *testing.T) {
	truth := nmSymbols(t, fixture("chain-gcc"))
	id := readelfBuildID(t, fixture("chain-gcc"))
	debug, err := os.ReadFile(fixture("chain-gcc.debug"))
	if err != nil {
		t.Fatal(err)
	}
	badCRC := append(append([]byte{}, debug...), 0) // same ELF, one byte longer
	otherDebug, err := os.ReadFile(fixture("inline-gcc.debug"))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		// bin is the fixture opened; setup lays out files in dir (the
		// binary's directory is dir/bin) and returns extra debug dirs.
		bin       string
		setup     func(t *testing.T, dir string) []string
		wantNames bool
		wantSrc   string
		want      Stats
	}{
		{"stripped without debug file", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string { return []string{filepath.Join(dir, "debug")} },
			false, "", Stats{}},
		{"build-id in --debug-dir", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				copyFile(t, fixture("chain-gcc.debug"), buildIDPath(filepath.Join(dir, "debug"), id))
				return []string{filepath.Join(dir, "debug")}
			}, true, "local", Stats{DebugFiles: 1}},
		{"build-id in second debug dir", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				copyFile(t, fixture("chain-gcc.debug"), buildIDPath(filepath.Join(dir, "d2"), id))
				return []string{filepath.Join(dir, "d1"), filepath.Join(dir, "d2")}
			}, true, "local", Stats{DebugFiles: 1}},
		{"debuglink next to binary", "chain-gcc-linked",
			func(t *testing.T, dir string) []string {
				copyFile(t, fixture("chain-gcc.debug"), filepath.Join(dir, "bin", "chain-gcc.debug"))
				return []string{}
			}, true, "local", Stats{DebugFiles: 1}},
		{"debuglink bad-CRC twin rejected, good one in .debug used", "chain-gcc-linked",
			func(t *testing.T, dir string) []string {
				writeFile(t, filepath.Join(dir, "bin", "chain-gcc.debug"), badCRC)
				copyFile(t, fixture("chain-gcc.debug"), filepath.Join(dir, "bin", ".debug", "chain-gcc.debug"))
				return []string{}
			}, true, "local", Stats{DebugFiles: 1, RejectedCRC: 1}},
		{"debuglink bad CRC only", "chain-gcc-linked",
			func(t *testing.T, dir string) []string {
				writeFile(t, filepath.Join(dir, "bin", "chain-gcc.debug"), badCRC)
				return []string{}
			}, false, "", Stats{RejectedCRC: 1}},
		{"debug file of another build", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				writeFile(t, buildIDPath(filepath.Join(dir, "debug"), id), otherDebug)
				return []string{filepath.Join(dir, "debug")}
			}, false, "", Stats{RejectedBuildID: 1}},
		{"truncated debug file", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				writeFile(t, buildIDPath(filepath.Join(dir, "debug"), id), debug[:len(debug)/2])
				return []string{filepath.Join(dir, "debug")}
			}, false, "", Stats{RejectedCorrupt: 1}},
		{"garbage debug file", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				writeFile(t, buildIDPath(filepath.Join(dir, "debug"), id), []byte("\x7fELF this is not a debug file at all"))
				return []string{filepath.Join(dir, "debug")}
			}, false, "", Stats{RejectedCorrupt: 1}},
		{"corrupt then good in a later dir", "chain-gcc-stripped",
			func(t *testing.T, dir string) []string {
				writeFile(t, buildIDPath(filepath.Join(dir, "d1"), id), debug[:4096])
				copyFile(t, fixture("chain-gcc.debug"), buildIDPath(filepath.Join(dir, "d2"), id))
				return []string{filepath.Join(dir, "d1"), filepath.Join(dir, "d2")}
			}, true, "local", Stats{DebugFiles: 1, RejectedCorrupt: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin", tt.bin)
			copyFile(t, fixture(tt.bin), bin)
			dirs := tt.setup(t, dir)
			s := New(nil, Options{DebugDirs: dirs})
			obj, err := s.Open(bin, bin)
			if err != nil {
				t.Fatal(err)
			}
			for _, fn := range []string{"leaf", "a", "b", "c", "d", "main"} {
				sym, ok := obj.Lookup(truth[fn] + 1)
				switch {
				case tt.wantNames && (!ok || sym.Function != fn):
					t.Errorf("Lookup(%s+1) = %q, %v; want %s", fn, sym.Function, ok, fn)
				case !tt.wantNames && ok:
					t.Errorf("Lookup(%s+1) = %q without a valid debug file, want no symbol", fn, sym.Function)
				}
			}
			if got := obj.DebugSource(); got != tt.wantSrc {
				t.Errorf("DebugSource = %q, want %q", got, tt.wantSrc)
			}
			got := s.Stats()
			got.Parsed, got.DWARFLoads = 0, 0
			if got != tt.want {
				t.Errorf("Stats = %+v, want %+v", got, tt.want)
			}
			// Unsymbolized addresses get no name (the collector keeps
			// them as module+offset frames).
			m := Mapping{Start: 0x400000, Limit: 0x800000, Offset: 0}
			if !tt.wantNames {
				if syms := obj.Symbols(nil, m, 0x400000+truth["leaf"]+1); len(syms) != 0 {
					t.Errorf("Symbols = %+v, want none", syms)
				}
			}
		})
	}
}

func TestDebugLink(t *testing.T) {
	ef := openELF(t, fixture("chain-gcc-linked"))
	name, crc, ok := debugLink(ef)
	want, err := fileCRC(fixture("chain-gcc.debug"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || name != "chain-gcc.debug" || crc != want {
		t.Errorf("debugLink = %q, %08x, %v; want chain-gcc.debug, %08x", name, crc, ok, want)
	}
	if _, _, ok := debugLink(openELF(t, fixture("chain-gcc"))); ok {
		t.Error("debugLink found a link in a binary without one")
	}
}

func TestVerifyDebugFile(t *testing.T) {
	id := readelfBuildID(t, fixture("chain-gcc"))
	dir := t.TempDir()
	trunc := filepath.Join(dir, "trunc")
	data, _ := os.ReadFile(fixture("chain-gcc.debug"))
	writeFile(t, trunc, data[:len(data)-100])
	tests := []struct {
		name, path, id string
		ok             bool
	}{
		{"matching", fixture("chain-gcc.debug"), id, true},
		{"other build", fixture("inline-gcc.debug"), id, false},
		{"truncated", trunc, id, false},
		{"missing", filepath.Join(dir, "nope"), id, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := VerifyDebugFile(tt.path, tt.id); (err == nil) != tt.ok {
				t.Errorf("VerifyDebugFile = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestCacheByteBound checks that the cache evicts by estimated memory as
// well as by count, keeping the most recent object. A Go binary's pclntab
// is mapped from the file, not charged: the bound is in heap bytes.
func TestCacheByteBound(t *testing.T) {
	gcc, goprog := fixture("chain-gcc"), fixture("goprog")
	s := New(nil, Options{MaxBytes: 1})
	if _, err := s.Open(gcc, gcc); err != nil {
		t.Fatal(err)
	}
	small := s.Bytes()
	if small <= 0 || small > 200<<10 {
		t.Fatalf("chain-gcc estimated at %d bytes", small)
	}
	if _, err := s.Open(goprog, goprog); err != nil {
		t.Fatal(err)
	}
	pcln := openELF(t, goprog).Section(".gopclntab").Size
	// Each object alone is over the bound: the most recent stays.
	if s.Len() != 1 || s.Stats().Evicted != 1 || s.Bytes() <= 0 || s.Bytes() >= int64(pcln) {
		t.Errorf("Len %d, Evicted %d, Bytes %d (pclntab %d, mapped)", s.Len(), s.Stats().Evicted, s.Bytes(), pcln)
	}
	if got := s.Pclntabs().MappedBytes(); got != int64(pcln) {
		t.Errorf("store maps %d pclntab bytes, want %d", got, pcln)
	}
	if _, err := s.Open(gcc, gcc); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 || s.Bytes() != small || s.Pclntabs().MappedBytes() != 0 {
		t.Errorf("after reopening chain-gcc: Len %d, Bytes %d, mapped %d, want 1, %d, 0", s.Len(), s.Bytes(), s.Pclntabs().MappedBytes(), small)
	}
}
