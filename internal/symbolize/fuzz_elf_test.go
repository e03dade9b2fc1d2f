package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// Symbol sources come from any file a sampled process maps: parsing must
// never panic or allocate what a header claims without bound.

// Seeds in testdata/fuzz: fixture objects without DWARF.
func FuzzSymbolizeELF(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "obj")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s := New(nil, Options{DebugDirs: []string{}})
		o, err := s.Open(path, "/fuzz/obj")
		if err != nil {
			return
		}
		m := Mapping{Start: 0x400000, Limit: 0x800000}
		_ = o.Identity()
		for _, addr := range []uint64{0x400000, 0x401000, 0x401234, 0x7fffff} {
			_ = o.Symbols(nil, m, addr)
		}
		if ef, err := elf.NewFile(bytes.NewReader(data)); err == nil {
			for _, sec := range ef.Sections {
				_, _ = o.Lookup(sec.Addr)
				_ = o.LookupInlined(sec.Addr+1, nil)
			}
		}
	})
}

func FuzzPclntab(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		p, err := gopclntab.Find(ef)
		if err != nil {
			return
		}
		g, err := newGoTable(p)
		if err != nil {
			return
		}
		for _, fn := range g.tab.Funcs {
			g.lookup(fn.Entry)
		}
	})
}

func FuzzKallsyms(f *testing.F) {
	f.Add("ffffffff81000000 T _stext\nffffffff81000010 t helper [mod]\n")
	f.Add("0000000000000000 A fixed_percpu_data\n")
	f.Add("zz T x\n")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := parseKallsyms(strings.NewReader(text))
		if err != nil {
			return
		}
		for _, a := range []uint64{0, 0xffffffff81000000, 0xffffffff81000011, ^uint64(0)} {
			k.Lookup(a)
			k.Resolve(a)
		}
	})
}
