package tracectx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// dynsym is a file's .dynsym and its string table, read raw. Looking two
// names up this way costs two section reads; elf.File.DynamicSymbols
// builds a string and version for every symbol, 3,000 for libc, and the
// agent scans every module of every process it sees (several times while
// a process publishes no context yet).
//
// Both sections are mapped from the file when they can be
// (internal/elfmap) rather than read onto the heap: the .dynsym of a big
// C++ library or of Chromium is megabytes, read whole by every scan. A
// lookup touches all of it; the pages go after each one.
type dynsym struct {
	syms, strs []byte
	order      binary.ByteOrder
	maps       []*elfmap.Section // the mappings syms and strs are in
}

// section returns the data of s, mapped when it can be.
func (d *dynsym) section(s *elf.Section) ([]byte, error) {
	if m, ok := elfmap.Map(s); ok {
		d.maps = append(d.maps, m)
		return m.Data, nil
	}
	return s.Data()
}

const sym64Size = 24 // sizeof(Elf64_Sym)

// readDynsym reads .dynsym; elf.ErrNoSymbols when the file has none or
// is not a 64-bit file (the only kind the symbols are looked up in).
func readDynsym(f *elf.File) (*dynsym, error) { return readSymbols(f, elf.SHT_DYNSYM) }

// readSymtab reads .symtab the same way: a statically linked executable
// (musl-gcc -static) has no .dynsym, and its linker resolved every TLS
// access to local-exec, so the symbol's value is all a reader needs.
func readSymtab(f *elf.File) (*dynsym, error) { return readSymbols(f, elf.SHT_SYMTAB) }

func readSymbols(f *elf.File, typ elf.SectionType) (*dynsym, error) {
	if f.Class != elf.ELFCLASS64 {
		return nil, elf.ErrNoSymbols
	}
	var s *elf.Section
	for _, sec := range f.Sections {
		if sec.Type == typ {
			s = sec
			break
		}
	}
	if s == nil {
		return nil, elf.ErrNoSymbols
	}
	if int(s.Link) <= 0 || int(s.Link) >= len(f.Sections) {
		return nil, fmt.Errorf("string table index %d out of range", s.Link)
	}
	d := &dynsym{order: f.ByteOrder}
	syms, err := d.section(s)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Name, err)
	}
	if len(syms)%sym64Size != 0 {
		return nil, fmt.Errorf("%s: size %d not a multiple of %d", s.Name, len(syms), sym64Size)
	}
	strs, err := d.section(f.Sections[s.Link])
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Sections[s.Link].Name, err)
	}
	d.syms, d.strs = syms, strs
	return d, nil
}

// lookup returns the first symbol named name and its index in .dynsym
// (counting the null symbol 0), for which match is true.
// A file truncated under the mappings answers not found (counted by
// elfmap.Faults).
func (d *dynsym) lookup(name string, match func(elf.Symbol) bool) (i int, sym elf.Symbol, found bool) {
	if len(d.maps) > 0 {
		ok := true
		defer func() {
			for _, m := range d.maps {
				m.DropPages()
			}
			runtime.KeepAlive(d)
			if !ok {
				i, sym, found = 0, elf.Symbol{}, false
			}
		}()
		defer elfmap.Recover(elfmap.Guard(), &ok)
	}
	for i := 1; (i+1)*sym64Size <= len(d.syms); i++ {
		e := d.syms[i*sym64Size : (i+1)*sym64Size]
		off := uint64(d.order.Uint32(e[0:4]))
		end := off + uint64(len(name))
		if end >= uint64(len(d.strs)) || d.strs[end] != 0 || !bytes.Equal(d.strs[off:end], []byte(name)) {
			continue
		}
		s := elf.Symbol{
			Name:    name,
			Info:    e[4],
			Other:   e[5],
			Section: elf.SectionIndex(d.order.Uint16(e[6:8])),
			Value:   d.order.Uint64(e[8:16]),
			Size:    d.order.Uint64(e[16:24]),
		}
		if match(s) {
			return i, s, true
		}
	}
	return 0, elf.Symbol{}, false
}
