package symbolize

import (
	"fmt"
	"os"
	"os/exec"
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
	s := New(nil, Options{})
	obj, err := s.Open(libc, libc)
	if err != nil {
		t.Fatal(err)
	}
	if !obj.HasDWARF() {
		t.Fatal("no DWARF from the debug file")
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
	s.Trim() // new units were built: the data stays one more batch
	s.Trim() // a batch without new units: the data goes
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
	s.Trim()
	if s.Bytes() > 4*bytes {
		t.Errorf("cache holds %d bytes after Trim, %d before the second batch", s.Bytes(), bytes)
	}
	t.Logf("%d+%d addresses, cache %d then %d bytes, stats %+v", len(first), len(second), bytes, s.Bytes(), s.Stats())
}
