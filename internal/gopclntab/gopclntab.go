// Package gopclntab locates the function table (pclntab) of Go binaries
// and shares it between the caches that read it: the symbolizer
// (functions, files, lines) and the unwinder (SP deltas). Both stages need
// the same bytes, so the table lives in a package below either.
package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// ErrNotFound is returned for files that are not Go binaries.
var ErrNotFound = errors.New("no Go pclntab")

// pclntab magics, newest first (Go 1.20+, 1.18, 1.16, 1.2).
var pclnMagics = []uint32{0xfffffff1, 0xfffffff0, 0xfffffffa, 0xfffffffb}

// Table is a located Go function table.
type Table struct {
	// Data starts at the pcHeader.
	Data []byte
	// Addr is the virtual address of Data.
	Addr uint64
	// TextStart is the address of runtime.text, which 1.18+ function
	// entries are relative to.
	TextStart uint64
	// mapped is the file mapping Data lies in, nil when Data is heap:
	// readers of Data keep the Table reachable while they read.
	mapped *elfmap.Section
}

// Find locates the Go function table of f: by the .gopclntab
// section (mapped from the file when f reads an *os.File), or, in binaries whose section headers are gone, by scanning
// the read-only segments for the pcHeader magic. Go's -s -w only drops
// .symtab and DWARF, so the section is the usual path.
func Find(f *elf.File) (*Table, error) {
	s := f.Section(".gopclntab")
	if s == nil {
		// External linking of PIE places it in the RELRO segment.
		s = f.Section(".data.rel.ro.gopclntab")
	}
	if s != nil {
		if m, ok := elfmap.Map(s); ok {
			// A Go binary's pclntab is a third of it, and lookups
			// touch a few pages: mapped, not read.
			if !validPclnHeader(m.Data) {
				return nil, fmt.Errorf("read .gopclntab: bad header: %w", ErrNotFound)
			}
			return &Table{Data: m.Data, Addr: s.Addr, TextStart: textStart(f, m.Data, s.Addr), mapped: m}, nil
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read .gopclntab: %w", err)
		}
		if !validPclnHeader(data) {
			return nil, fmt.Errorf("read .gopclntab: bad header: %w", ErrNotFound)
		}
		return &Table{Data: data, Addr: s.Addr, TextStart: textStart(f, data, s.Addr)}, nil
	}
	if len(f.Sections) > 0 && !isGoBinary(f) {
		return nil, ErrNotFound
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X != 0 {
			continue
		}
		// Filesz comes from the file: read what is there rather than
		// allocate what the header claims (it may claim exabytes).
		data, err := io.ReadAll(io.LimitReader(p.Open(), maxSegmentScan))
		if err != nil || uint64(len(data)) != p.Filesz {
			continue
		}
		for off := 0; off+16 <= len(data); off += 8 {
			if validPclnHeader(data[off:]) {
				d := data[off:]
				return &Table{Data: d, Addr: p.Vaddr + uint64(off), TextStart: textStart(f, d, p.Vaddr+uint64(off))}, nil
			}
		}
	}
	return nil, ErrNotFound
}

// maxSegmentScan bounds the segment read when looking for a pclntab
// without section headers; Go's largest binaries hold a few hundred MiB.
const maxSegmentScan = 1 << 30

// validPclnHeader checks the magic, padding, instruction quantum and
// pointer size of a pcHeader, the same checks the runtime makes.
func validPclnHeader(d []byte) bool {
	if len(d) < 16 {
		return false
	}
	magic := binary.LittleEndian.Uint32(d)
	known := false
	for _, m := range pclnMagics {
		known = known || magic == m
	}
	if !known || d[4] != 0 || d[5] != 0 {
		return false
	}
	if q := d[6]; q != 1 && q != 2 && q != 4 {
		return false
	}
	if ps := d[7]; ps != 4 && ps != 8 {
		return false
	}
	nfunc := binary.LittleEndian.Uint64(d[8:])
	return d[7] != 8 || (nfunc > 0 && nfunc < 1<<24)
}

// textStart returns runtime.text, which the function entries of the
// pclntab at addr are relative to. It is the 1.18+ header's field when the
// linker filled it in; a PIE leaves the field to a relocation, whose addend
// is the address; a binary with C code (cgo, internal or external linking)
// leaves it 0 and has C code before runtime.text in .text, so the address
// is read from the module data, which points at the pclntab. Only a pure Go
// binary falls back to the start of .text (or the first executable segment),
// where runtime.text lies.
func textStart(f *elf.File, d []byte, addr uint64) uint64 {
	magic := binary.LittleEndian.Uint32(d)
	if (magic == 0xfffffff1 || magic == 0xfffffff0) && d[7] == 8 && len(d) >= 32 {
		if v := binary.LittleEndian.Uint64(d[24:]); v != 0 {
			return v
		}
		if v, ok := relativeAddend(f, addr+24); ok {
			return v
		}
		if v, ok := moduleText(f, addr); ok {
			return v
		}
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.Vaddr
		}
	}
	return 0
}

// relativeAddend returns the addend of the relative relocation that fills
// the word at addr as a PIE is loaded.
func relativeAddend(f *elf.File, addr uint64) (uint64, bool) {
	if f.Class != elf.ELFCLASS64 {
		return 0, false
	}
	s := f.Section(".rela.dyn")
	if s == nil || s.Size > maxSegmentScan {
		return 0, false
	}
	data, err := s.Data()
	if err != nil {
		return 0, false
	}
	for off := 0; off+24 <= len(data); off += 24 {
		r := data[off:]
		if f.ByteOrder.Uint64(r) != addr {
			continue
		}
		typ := elf.R_TYPE64(f.ByteOrder.Uint64(r[8:]))
		if f.Machine == elf.EM_X86_64 && typ == uint32(elf.R_X86_64_RELATIVE) ||
			f.Machine == elf.EM_AARCH64 && typ == uint32(elf.R_AARCH64_RELATIVE) {
			return f.ByteOrder.Uint64(r[16:]), true
		}
	}
	return 0, false
}

// Words of runtime.moduledata (Go 1.16+): pcHeader, then six slices, then
// findfunctab, minpc, maxpc, text, etext.
const (
	mdMinPC = 1 + 6*3 + 1
	mdMaxPC = mdMinPC + 1
	mdText  = mdMinPC + 2
	mdEText = mdMinPC + 3
)

// moduleText finds the module data whose pcHeader is the pclntab at addr
// and returns its text address, checked against its pc bounds and the
// executable segments.
func moduleText(f *elf.File, addr uint64) (uint64, bool) {
	for _, name := range []string{".go.module", ".noptrdata", ".data"} {
		s := f.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Size > maxSegmentScan {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		word := func(i int) uint64 { return f.ByteOrder.Uint64(data[i:]) }
		for off := 0; off+(mdEText+1)*8 <= len(data); off += 8 {
			if word(off) != addr {
				continue
			}
			text, minpc, maxpc, etext := word(off+mdText*8), word(off+mdMinPC*8), word(off+mdMaxPC*8), word(off+mdEText*8)
			if text != 0 && text <= minpc && minpc < maxpc && maxpc <= etext && executable(f, text, etext) {
				return text, true
			}
		}
	}
	return 0, false
}

// executable reports whether [start, end) lies in one executable segment.
func executable(f *elf.File, start, end uint64) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && start >= p.Vaddr && end <= p.Vaddr+p.Memsz {
			return true
		}
	}
	return false
}

// isGoBinary reports whether f looks like a Go binary, so that C binaries
// are not scanned for a pclntab.
func isGoBinary(f *elf.File) bool {
	if f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil {
		return true
	}
	if s := f.Section(".note.go.buildid"); s != nil {
		return true
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			d := make([]byte, min(p.Filesz, 256))
			if _, err := p.ReadAt(d, 0); err == nil && bytes.Contains(d, []byte("Go\x00\x00")) {
				return true
			}
		}
	}
	return false
}
