package tracectx

import (
	"debug/elf"
	"testing"
)

// TestDynsymLookup checks the raw .dynsym scan against debug/elf's
// DynamicSymbols: same index (counting the null symbol), value, size,
// type and section for every named symbol of libc, and no match for a
// name that is only a prefix of others or absent.
func TestDynsymLookup(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		t.Skipf("no libc to read: %v", err)
	}
	defer f.Close()
	want, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := readDynsym(f)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]bool{}
	checked := 0
	for i, w := range want {
		if w.Name == "" || first[w.Name] {
			continue // lookup returns the first of equal names
		}
		first[w.Name] = true
		idx, got, ok := ds.lookup(w.Name, func(elf.Symbol) bool { return true })
		if !ok || idx != i+1 || got.Value != w.Value || got.Size != w.Size || got.Info != w.Info || got.Section != w.Section {
			t.Fatalf("lookup(%q) = %d %+v %v, want %d %+v", w.Name, idx, got, ok, i+1, w)
		}
		checked++
	}
	if checked < 1000 {
		t.Errorf("only %d symbols checked", checked)
	}
	for _, name := range []string{"mallo", "no_such_symbol_here", ThreadContextSymbol} {
		if _, s, ok := ds.lookup(name, func(elf.Symbol) bool { return true }); ok {
			t.Errorf("lookup(%q) = %+v, want none", name, s)
		}
	}
	// The match function filters: malloc is a function, not TLS.
	if _, _, ok := ds.lookup("malloc", func(s elf.Symbol) bool { return elf.ST_TYPE(s.Info) == elf.STT_TLS }); ok {
		t.Error("lookup(malloc, TLS only) matched a function")
	}
}
