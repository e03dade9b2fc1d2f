package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// symbol is one function of an ELF symbol table. Its name is not
// copied: it is the offset of the name in the string table of its source
// (symtab.strs[src]), the file's own mapped .strtab or .dynstr, read at
// lookup. 24 bytes a symbol, where a string of its own cost 40 and the
// name's length again (a big C++ library's mangled names are a hundred
// bytes each).
type symbol struct {
	addr, end uint64
	name      uint32 // offset in strs[src]
	src       uint8
	rank      uint8 // higher wins among aliases at one address
	label     bool  // STT_NOTYPE: code written in assembly without .type
}

// symtab is an address-sorted table of function symbols.
type symtab struct {
	syms []symbol
	// strs are the string tables the symbols' names are in, by source:
	// the mapping of a file's .strtab or .dynstr (maps keeps it, and
	// dropPages releases its touched pages), or, for a table debug/elf
	// had to read, a copy of the names kept (heap counts its bytes).
	strs [][]byte
	maps []*elfmap.Section
	heap int
}

// name returns the name of s, without a version ("memcpy@@GLIBC_2.14").
// A string table truncated under its mapping answers "" (counted by
// elfmap.Faults), which the caller treats as no symbol.
func (t *symtab) name(s symbol) (name string) {
	defer elfmap.Recover(elfmap.Guard(), new(bool))
	b := t.strs[s.src][s.name:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if i := bytes.IndexByte(b, '@'); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// dropPages releases the touched pages of the mapped string tables.
func (t *symtab) dropPages() {
	for _, m := range t.maps {
		m.DropPages()
	}
}

// maxOverlap bounds how many earlier symbols a lookup inspects when the
// nearest one ends before the address (nested or overlapping symbols).
const maxOverlap = 4

// newSymtab builds the table from .symtab, falling back to .dynsym. Both
// are read when present because .dynsym may hold exported symbols that a
// partial strip removed from .symtab.
// files[0] is the binary, further files are its separate debug files.
func newSymtab(files ...*elf.File) *symtab {
	f := files[0]
	t := &symtab{}
	var syms []symbol
	add := func(ff *elf.File, s elf.Symbol, src uint8, off uint32) {
		if s.Value == 0 || s.Section == elf.SHN_UNDEF || s.Name == "" {
			return
		}
		switch typ := elf.ST_TYPE(s.Info); {
		case typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC:
			syms = append(syms, symbol{addr: s.Value, end: s.Value + s.Size, name: off, src: src, rank: rankOf(s)})
		case typ == elf.STT_NOTYPE && s.Size == 0 && codeLabel(ff, s):
			syms = append(syms, symbol{addr: s.Value, end: s.Value, name: off, src: src, label: true})
		}
	}
	for _, ff := range files {
		for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
			if len(t.strs) >= 255 {
				break
			}
			src := uint8(len(t.strs))
			before := len(syms)
			if strs, ok := eachMappedSymbol(ff, typ, func(s elf.Symbol, off uint32) { add(ff, s, src, off) }); ok {
				t.strs = append(t.strs, strs.Data)
				t.maps = append(t.maps, strs)
				continue
			}
			// A read that faulted half-way: its symbols name a table
			// not kept.
			syms = syms[:before]
			read := ff.Symbols
			if typ == elf.SHT_DYNSYM {
				read = ff.DynamicSymbols
			}
			if all, err := read(); err == nil {
				// Copy the names of the symbols kept, each
				// NUL-terminated, into one table of their own.
				var names []byte
				n := len(syms)
				for _, s := range all {
					add(ff, s, src, uint32(len(names)))
					if len(syms) > n {
						n = len(syms)
						names = append(append(names, s.Name...), 0)
					}
				}
				if len(names) > 0 {
					t.strs = append(t.strs, slices.Clip(names))
					t.heap += len(names)
				}
			}
		}
	}
	sort.Slice(syms, func(i, j int) bool {
		if syms[i].addr != syms[j].addr {
			return syms[i].addr < syms[j].addr
		}
		return syms[i].rank > syms[j].rank
	})
	// Keep one symbol per address: the best-ranked alias, widened to the
	// largest size among the aliases.
	out := syms[:0]
	for _, s := range syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	// A label inside a sized function is a jump target, not a function:
	// it must not split the function it lies in.
	kept := out[:0]
	var covered uint64
	for _, s := range out {
		if s.label && s.addr < covered {
			continue
		}
		kept = append(kept, s)
		covered = max(covered, s.end)
	}
	out = kept
	// A size of zero means unknown (hand-written assembly): let it extend
	// to the next symbol, but never past the end of its section.
	for i := range out {
		if out[i].end > out[i].addr {
			continue
		}
		end := sectionEnd(f, out[i].addr)
		if i+1 < len(out) && out[i+1].addr < end {
			end = out[i+1].addr
		}
		out[i].end = end
	}
	t.syms = out
	return t
}

// eachMappedSymbol calls fn with the symbols of ff's section of type typ
// (.symtab or .dynsym) that may name code, and the offset of each name in
// the string table, read from mappings of the section and its string
// table: elf.File.Symbols reads both onto the heap and makes a string of
// every name, tens of MB at once for a big C++ library. The Name fn gets
// is no copy: it points into the mapping, and is valid only during the
// call. It returns the mapped string table, which the names stay in, and
// true; false, having called nothing, when ff has no such section or it
// cannot be mapped (64-bit little-endian files from disk only): the
// caller reads it then.
func eachMappedSymbol(ff *elf.File, typ elf.SectionType, fn func(s elf.Symbol, nameOff uint32)) (names *elfmap.Section, mapped bool) {
	if ff.Class != elf.ELFCLASS64 || ff.Data != elf.ELFDATA2LSB {
		return nil, false
	}
	var sec *elf.Section
	for _, s := range ff.Sections {
		if s.Type == typ {
			sec = s
			break
		}
	}
	if sec == nil || int(sec.Link) <= 0 || int(sec.Link) >= len(ff.Sections) {
		return nil, false
	}
	symMap, ok := elfmap.Map(sec)
	if !ok {
		return nil, false
	}
	strMap, ok := elfmap.Map(ff.Sections[sec.Link])
	if !ok || len(strMap.Data) > math.MaxUint32 {
		return nil, false
	}
	defer func() {
		// Release the pages at once; the symbols' mapping goes with
		// the GC, the names' with the table that keeps it.
		symMap.DropPages()
		strMap.DropPages()
		runtime.KeepAlive(symMap)
		if !mapped {
			names = nil
		}
	}()
	// A file truncated under the mappings faults: the caller reads it.
	defer elfmap.Recover(elfmap.Guard(), &mapped)
	data, strs := symMap.Data, strMap.Data
	const symSize = 24 // Elf64_Sym
	for off := symSize; off+symSize <= len(data); off += symSize {
		if off%(dropEvery*symSize) == 0 {
			// Whole tables are read once: keep the pages resident
			// for a slice of the read, not all of it.
			symMap.DropPages()
			strMap.DropPages()
		}
		e := data[off : off+symSize]
		info := e[4]
		if t := elf.ST_TYPE(info); t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC && t != elf.STT_NOTYPE {
			continue
		}
		value := binary.LittleEndian.Uint64(e[8:])
		shndx := elf.SectionIndex(binary.LittleEndian.Uint16(e[6:]))
		nameOff := int(binary.LittleEndian.Uint32(e[0:]))
		if value == 0 || shndx == elf.SHN_UNDEF || nameOff <= 0 || nameOff >= len(strs) {
			continue
		}
		end := bytes.IndexByte(strs[nameOff:], 0)
		if end <= 0 {
			continue
		}
		fn(elf.Symbol{
			Name: unsafe.String(&strs[nameOff], end), Info: info, Other: e[5],
			Section: shndx, Value: value, Size: binary.LittleEndian.Uint64(e[16:]),
		}, uint32(nameOff))
	}
	return strMap, true
}

// dropEvery is how many symbols eachMappedSymbol reads between releases
// of the pages it touched: 1.5 MiB of symbols and their names.
const dropEvery = 1 << 16

// codeLabel reports whether a typeless symbol names code: one in an
// executable section, not an assembler-local or mapping symbol (.L1, $x).
// The dynamic loader's entry code (_start, _dl_start_user) is such a label
// and lies under every stack of a process while the loader runs.
func codeLabel(f *elf.File, s elf.Symbol) bool {
	if strings.HasPrefix(s.Name, ".L") || strings.HasPrefix(s.Name, "$") {
		return false
	}
	i := int(s.Section)
	return i > 0 && i < len(f.Sections) && f.Sections[i].Flags&elf.SHF_EXECINSTR != 0
}

// rankOf prefers names with fewer leading underscores (nanosleep over
// __nanosleep over __GI___nanosleep), then global over weak over local.
func rankOf(s elf.Symbol) uint8 {
	under := len(s.Name) - len(strings.TrimLeft(s.Name, "_"))
	r := uint8(max(0, 0x3f-under)) << 2
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL:
		r += 2
	case elf.STB_WEAK:
		r++
	}
	return r
}

func sectionEnd(f *elf.File, addr uint64) uint64 {
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && addr >= s.Addr && addr < s.Addr+s.Size {
			return s.Addr + s.Size
		}
	}
	return addr + 1
}

// lookup returns the function containing vaddr; an address past the end
// of the nearest symbol belongs to no symbol, so no wrong name is made up.
func (t *symtab) lookup(vaddr uint64) (symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > vaddr })
	for j := i - 1; j >= 0 && j >= i-maxOverlap; j-- {
		if vaddr < t.syms[j].end {
			return t.syms[j], true
		}
	}
	return symbol{}, false
}

// len reports the number of function symbols.
func (t *symtab) len() int { return len(t.syms) }

// dropCovered removes the symbols whose whole range another table answers
// (a Go binary's pclntab, which Lookup asks first): what stays is the C
// and assembly code outside it, so a Go binary's hundred thousand
// function symbols are not kept twice.
func (t *symtab) dropCovered(covers func(vaddr uint64) bool) {
	kept := t.syms[:0]
	for _, s := range t.syms {
		if covers(s.addr) && covers(max(s.addr, s.end-1)) {
			continue
		}
		kept = append(kept, s)
	}
	t.syms = slices.Clone(kept)
}
