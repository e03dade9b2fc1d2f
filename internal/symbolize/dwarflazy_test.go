package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestLibcDebugFileTrim checks lookups in libc through its separate debug
// file (libc6-dbg, compressed DWARF) against llvm-symbolizer (see
// llvmSymbolizer for why not addr2line here), before and after
// Trim released the section data: addresses of units not seen before
// load it again, units seen before answer from their tables.
func TestLibcDebugFileTrim(t *testing.T) {
	id, err := Identify(libc)
	if err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat(buildIDPath("/usr/lib/debug", id.BuildID)); err != nil {
		t.Skipf("no libc debug file (libc6-dbg): %v", err)
	}
	if _, err := exec.LookPath("llvm-symbolizer"); err != nil {
		t.Skipf("no llvm-symbolizer (llvm-19) for the ground truth: %v", err)
	}
	var all []uint64
	for _, a := range nmSymbolsDyn(t, libc) {
		if a != 0 {
			all = append(all, a+4)
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	var first, second []uint64
	for i, a := range all {
		switch i % 40 {
		case 0:
			first = append(first, a)
		case 20:
			second = append(second, a)
		}
	}
	for _, tt := range []struct {
		name  string
		spill bool
	}{{"inflate again", false}, {"spill file", true}} {
		t.Run(tt.name, func(t *testing.T) { testLibcTrim(t, first, second, tt.spill) })
	}
}

func testLibcTrim(t *testing.T, first, second []uint64, spill bool) {
	opts := Options{}
	if spill {
		opts.DWARFSpillDir = t.TempDir()
	}
	s := New(nil, opts)
	obj, err := s.Open(libc, libc)
	if err != nil {
		t.Fatal(err)
	}
	if !obj.HasDWARF() {
		t.Fatal("no DWARF from the debug file")
	}
	if spill {
		files, _ := filepath.Glob(filepath.Join(opts.DWARFSpillDir, "*.dwarf"))
		if len(files) != 1 {
			t.Fatalf("spill files %v, want one", files)
		}
	}
	check := func(addrs []uint64) {
		t.Helper()
		want := llvmSymbolizer(t, libc, addrs)
		lines := 0
		for i, a := range addrs {
			got := obj.LookupInlined(a, nil)
			w := want[i]
			if len(w) == 0 || w[len(w)-1].Line == 0 {
				continue
			}
			lines++
			// The outer function is named from the symbol table, which
			// may pick another alias than DWARF's name (malloc and
			// __libc_malloc); everything else must match.
			if len(got) == len(w) {
				got = slices.Clone(got)
				got[len(got)-1].Function = w[len(w)-1].Function
			}
			if fmt.Sprint(stripDirs(got)) != fmt.Sprint(stripDirs(w)) {
				t.Errorf("%#x: got %v, addr2line %v", a, got, w)
			}
		}
		if lines < len(addrs)/2 {
			t.Errorf("only %d of %d addresses had a line", lines, len(addrs))
		}
	}
	check(first)
	if got := s.Stats().DWARFLoads; got != 1 {
		t.Errorf("DWARFLoads after open = %d, want 1", got)
	}
	s.Trim() // the report is done: the section data goes
	bytes := s.Bytes()
	check(first) // answered from the tables already built
	if got := s.Stats().DWARFLoads; got != 1 {
		t.Errorf("DWARFLoads after Trim and known units = %d, want 1", got)
	}
	check(second) // units not seen: loads again
	if got := s.Stats().DWARFLoads; got != 2 {
		t.Errorf("DWARFLoads after unseen units = %d, want 2", got)
	}
	s.Trim()
	if s.Bytes() > 4*bytes {
		t.Errorf("cache holds %d bytes after Trim, %d before the second batch", s.Bytes(), bytes)
	}
	t.Logf("%d+%d addresses, cache %d then %d bytes, stats %+v", len(first), len(second), bytes, s.Bytes(), s.Stats())
}

// TestDWARFUnitsAloneMatchWhole reads every unit of the fixtures (and of
// libc's debug file, when installed) both ways lazyDWARF can: each unit
// through a dwarf.Data of its own, and all units through one. Every
// address of every unit must give the same chain.
func TestDWARFUnitsAloneMatchWhole(t *testing.T) {
	for _, path := range unitTestFiles() {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var st stats
			ef, version, alone := openUnitTestFile(t, path, &st)
			if alone.whole {
				t.Fatal("read whole: no unit refers to another in these files")
			}
			whole, err := newLazyDWARF(ef, path, version, &st, spillOptions{})
			if err != nil {
				t.Fatal(err)
			}
			whole.units, whole.spans, whole.tables = nil, nil, map[int32]*debugInfo{}
			if !whole.loadLocked() {
				t.Fatalf("load again: %v", whole.failed)
			}
			if err := whole.indexWhole(); err != nil {
				t.Fatal(err)
			}
			if len(whole.units) != len(alone.units) {
				t.Fatalf("%d unit ranges read whole, %d alone", len(whole.units), len(alone.units))
			}
			n, step := 0, uint64(1)
			if len(alone.units) > 100 {
				step = 61 // libc: a sample of every unit's addresses
			}
			for _, u := range alone.units {
				for a := u.lo; a < u.hi; a += step {
					got, want := alone.locations(a), whole.locations(a)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("%#x: alone %v, whole %v", a, got, want)
					}
					n++
				}
			}
			if st.dwarfErrors.Load() != 0 {
				t.Errorf("%d DWARF errors", st.dwarfErrors.Load())
			}
			t.Logf("%d units, %d addresses", len(alone.spans), n)
		})
	}
}

// TestUnitEntryThroughItsAbbreviation reads every unit's own entry, as
// the index does, through the unit's abbreviation table cut to that
// entry's abbreviation and through the whole table: the two must agree,
// and the cut must have been made for the units it can be.
func TestUnitEntryThroughItsAbbreviation(t *testing.T) {
	for _, path := range unitTestFiles() {
		t.Run(filepath.Base(path), func(t *testing.T) {
			_, _, l := openUnitTestFile(t, path, &stats{})
			if !l.loadLocked() {
				t.Fatalf("load: %v", l.failed)
			}
			cut := 0
			for _, sp := range l.spans {
				info, err := l.src.read("info", sp.off, min(512, sp.end-sp.off))
				if err != nil {
					t.Fatal(err)
				}
				abbrev, err := l.src.read("abbrev", sp.aoff, sp.alen)
				if err != nil {
					t.Fatal(err)
				}
				if code, ok := l.firstEntryCode(info, sp); ok {
					if e, ok := abbrevEntry(abbrev, code); ok && len(e) < len(abbrev)-1 {
						cut++
					}
				}
				var got, want string
				for i, cuOnly := range []bool{true, false} {
					d, err := l.unitHead(sp, 512, cuOnly)
					if err != nil {
						t.Fatalf("unit at %#x (cut %v): %v", sp.off, cuOnly, err)
					}
					e, err := d.Reader().Next()
					if err != nil {
						t.Fatalf("unit at %#x (cut %v): %v", sp.off, cuOnly, err)
					}
					r, _ := d.Ranges(e)
					s := fmt.Sprint(e, r)
					if i == 0 {
						got = s
					} else {
						want = s
					}
				}
				if got != want {
					t.Fatalf("unit at %#x: through its abbreviation %s, through the table %s", sp.off, got, want)
				}
			}
			if cut == 0 {
				t.Errorf("no unit's table of %d was cut", len(l.spans))
			}
			t.Logf("%d units, %d tables cut", len(l.spans), cut)
		})
	}
}

// unitTestFiles are the files whose DWARF units the tests read: the
// fixtures, and libc's debug file when libc6-dbg is installed.
func unitTestFiles() []string {
	paths := []string{fixture("inline-gcc"), fixture("inline-clang"), fixture("chain-gcc"), fixture("inline-gcc.debug")}
	if id, err := Identify(libc); err == nil {
		if p := buildIDPath("/usr/lib/debug", id.BuildID); fileExists(p) {
			paths = append(paths, p)
		}
	}
	return paths
}

// openUnitTestFile opens path's DWARF as the symbolizer does: compressed
// DWARF (libc's) read from a spill file, small DWARF (the fixtures')
// built at once. The file is closed when the test ends.
func openUnitTestFile(t *testing.T, path string, st *stats) (*elf.File, fileStat, *lazyDWARF) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ef.Close() })
	version, err := statFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLazyDWARF(ef, path, version, st, spillOptions{dir: t.TempDir(), maxBytes: 1 << 30})
	if err != nil || l == nil {
		t.Fatalf("newLazyDWARF = %v, %v", l, err)
	}
	return ef, version, l
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestRefersAcross reads abbreviation tables: their length, and a
// reference to another unit only through DW_FORM_ref_addr (or indirect)
// on an abstract origin or specification.
func TestRefersAcross(t *testing.T) {
	// code 1, DW_TAG_subprogram (0x2e), children, attributes..., 0 0;
	// then the table's terminating 0, and a byte of the next table.
	table := func(attrs ...byte) []byte {
		b := append([]byte{1, 0x2e, 1}, attrs...)
		return append(b, 0, 0, 0, 0xaa)
	}
	tests := []struct {
		name             string
		abbrev           []byte
		refers, complete bool
	}{
		{"name strp, origin ref4", table(0x03, 0x0e, 0x31, 0x13), false, true},
		{"origin ref_addr", table(0x31, 0x10), true, true},
		{"specification ref_addr", table(0x47, 0x10), true, true},
		{"origin indirect", table(0x31, 0x16), true, true},
		{"sibling ref_addr is not a name", table(0x01, 0x10), false, true},
		{"implicit const skipped", table(0x3a, 0x21, 0x7f, 0x31, 0x13), false, true},
		{"truncated", []byte{1, 0x2e, 1, 0x31}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, refers, complete := refersAcross(tt.abbrev)
			if refers != tt.refers || complete != tt.complete {
				t.Errorf("refersAcross = %v, %v; want %v, %v", refers, complete, tt.refers, tt.complete)
			}
			if complete && n != len(tt.abbrev)-1 {
				t.Errorf("table length %d, want %d", n, len(tt.abbrev)-1)
			}
		})
	}
}

// TestSmallDWARFOutlivesItsFile: a binary with little DWARF has every
// unit built when it is opened, so its lines stay after the file is gone
// (a /proc/PID path of an exited process) and Trim.
func TestSmallDWARFOutlivesItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inline-gcc")
	copyFile(t, fixture("inline-gcc"), path)
	s := New(nil, Options{DebugDirs: []string{}})
	obj, err := s.Open(path, path)
	if err != nil {
		t.Fatal(err)
	}
	addr := nmSymbols(t, path)["outer"] + 4
	before := obj.LookupInlined(addr, nil)
	if len(before) == 0 || before[len(before)-1].Line == 0 {
		t.Fatalf("no line at outer+4: %v", before)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.Trim()
	if after := obj.LookupInlined(addr, nil); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after the file went: %v, before %v", after, before)
	}
	if st := s.Stats(); st.DWARFLoads != 1 || st.DWARFErrors != 0 {
		t.Errorf("stats %+v, want one load and no errors", st)
	}
}

// TestAbbrevEntry picks one abbreviation out of a table: past an entry
// with an implicit constant (DWARF 5), and none past the table's end.
func TestAbbrevEntry(t *testing.T) {
	first := []byte{1, 0x11, 1, 0x03, 0x08, 0x0b, formImplicitConst, 0xff, 0x7f, 0, 0} // compile unit: name string, byte_size implicit -129
	second := []byte{0x80, 0x01, 0x2e, 0, 0x03, 0x0e, 0, 0}                            // code 128, subprogram: name strp
	table := append(append(append([]byte{}, first...), second...), 0)
	for _, c := range []struct {
		code uint64
		want []byte
	}{{1, first}, {128, second}, {2, nil}} {
		got, ok := abbrevEntry(table, c.code)
		if ok != (c.want != nil) || !bytes.Equal(got, c.want) {
			t.Errorf("abbrevEntry(%d) = % x, %v; want % x", c.code, got, ok, c.want)
		}
	}
	if _, ok := abbrevEntry(table[:len(first)+3], 128); ok {
		t.Error("an entry cut short was returned")
	}
}

// TestReadAhead: reads served from blocks give the source's bytes, at a
// block's edges, past them, larger than a block, and its errors.
func TestReadAhead(t *testing.T) {
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	src := memSource{&sections{m: map[string][]byte{"info": data}}}
	r := &readAhead{source: src, block: 64}
	for _, c := range [][2]int{{0, 4}, {60, 4}, {62, 4}, {64, 64}, {100, 200}, {990, 10}, {996, 4}, {0, 1000}, {500, 0}} {
		got, err := r.read("info", c[0], c[1])
		if err != nil || !bytes.Equal(got, data[c[0]:c[0]+c[1]]) {
			t.Errorf("read(%d, %d) = % x, %v", c[0], c[1], got, err)
		}
	}
	for _, c := range [][2]int{{990, 11}, {1001, 1}, {-1, 2}} {
		if _, err := r.read("info", c[0], c[1]); err == nil {
			t.Errorf("read(%d, %d) past the section: no error", c[0], c[1])
		}
	}
}
