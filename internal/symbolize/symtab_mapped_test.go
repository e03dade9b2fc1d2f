package symbolize

import (
	"debug/elf"
	"slices"
	"strings"
	"testing"
)

// TestMappedSymbolsMatchElf checks that the symbols read from mapped
// .symtab and .dynsym are those debug/elf reads, for every symbol that
// may name code.
func TestMappedSymbolsMatchElf(t *testing.T) {
	for _, path := range []string{fixture("chain-gcc"), fixture("goprog"), "/lib/x86_64-linux-gnu/libc.so.6"} {
		f := openELF(t, path)
		for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
			read := f.Symbols
			if typ == elf.SHT_DYNSYM {
				read = f.DynamicSymbols
			}
			all, err := read()
			if err != nil {
				continue // no such table
			}
			var want, got []elf.Symbol
			for _, s := range all {
				switch elf.ST_TYPE(s.Info) {
				case elf.STT_FUNC, elf.STT_GNU_IFUNC, elf.STT_NOTYPE:
					if s.Value != 0 && s.Section != elf.SHN_UNDEF && s.Name != "" {
						want = append(want, elf.Symbol{Name: s.Name, Info: s.Info, Other: s.Other, Section: s.Section, Value: s.Value, Size: s.Size})
					}
				}
			}
			strtab := names0(f, typ)
			names, ok := eachMappedSymbol(f, typ, func(s elf.Symbol, off uint32) {
				// Name points into the mapping: keep a copy, and check
				// the offset names it.
				if string(strtab[off:int(off)+len(s.Name)]) != s.Name {
					t.Errorf("%s %v: offset %d does not name %q", path, typ, off, s.Name)
				}
				s.Name = strings.Clone(s.Name)
				got = append(got, s)
			})
			if !ok || names == nil {
				t.Fatalf("%s %v: not mapped", path, typ)
			}
			if !slices.Equal(got, want) || typ == elf.SHT_SYMTAB && len(want) == 0 {
				t.Errorf("%s %v: %d mapped symbols, %d from debug/elf, or they differ", path, typ, len(got), len(want))
			}
		}
	}
}

// names0 is the string table of ff's section of type typ, read by
// debug/elf.
func names0(ff *elf.File, typ elf.SectionType) []byte {
	for _, s := range ff.Sections {
		if s.Type == typ {
			b, _ := ff.Sections[s.Link].Data()
			return b
		}
	}
	return nil
}
