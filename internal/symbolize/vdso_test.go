package symbolize

import (
	"debug/elf"
	"os"
	"testing"
)

// TestVDSONamesFunctions copies this process's vDSO and names an address
// inside each of its functions, placed as another process would map it.
func TestVDSONamesFunctions(t *testing.T) {
	v, err := SelfVDSO()
	if err != nil {
		t.Skipf("no vDSO here: %v", err)
	}
	f, err := os.Open(v.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	const base = 0x7ffd12340000 // where some other process has it
	if !v.Covers(base, base+v.size) || v.Covers(0xf7fc0000, 0xf7fc0000+v.size) || v.Covers(base, base+v.size+4096) {
		t.Error("Covers: want 64-bit mappings of the image's size only")
	}
	m := Mapping{Start: base, Limit: base + v.size}
	s := New(nil, Options{})
	obj, err := s.Open(v.Path(), "[vdso]")
	if err != nil {
		t.Fatal(err)
	}
	if obj.Identity().BuildID == "" {
		t.Error("no build ID for the vDSO")
	}
	named := 0
	for _, sym := range syms {
		if elf.ST_TYPE(sym.Info) != elf.STT_FUNC || sym.Size == 0 {
			continue
		}
		fs := obj.Symbols(nil, m, base+sym.Value+sym.Size/2)
		if len(fs) == 0 || fs[0].Function == "" {
			t.Errorf("%s: frames %+v", sym.Name, fs)
			continue
		}
		named++
		t.Logf("%s (+%#x) named %s", sym.Name, sym.Value, fs[0].Function)
	}
	if named == 0 {
		t.Fatal("no function in the vDSO's .dynsym")
	}
}
