package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrNoPclntab is returned for files that are not Go binaries.
var ErrNoPclntab = errors.New("no Go pclntab")

// pclntab magics, newest first (Go 1.20+, 1.18, 1.16, 1.2).
var pclnMagics = []uint32{0xfffffff1, 0xfffffff0, 0xfffffffa, 0xfffffffb}

// Pclntab is a located Go function table.
type Pclntab struct {
	// Data starts at the pcHeader.
	Data []byte
	// Addr is the virtual address of Data.
	Addr uint64
	// TextStart is the address of runtime.text, which 1.18+ function
	// entries are relative to.
	TextStart uint64
}

// FindPclntab locates the Go function table of f: by the .gopclntab
// section, or, in binaries whose section headers are gone, by scanning
// the read-only segments for the pcHeader magic. Go's -s -w only drops
// .symtab and DWARF, so the section is the usual path.
func FindPclntab(f *elf.File) (*Pclntab, error) {
	s := f.Section(".gopclntab")
	if s == nil {
		// External linking of PIE places it in the RELRO segment.
		s = f.Section(".data.rel.ro.gopclntab")
	}
	if s != nil {
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read .gopclntab: %w", err)
		}
		if !validPclnHeader(data) {
			return nil, fmt.Errorf("read .gopclntab: bad header: %w", ErrNoPclntab)
		}
		return &Pclntab{Data: data, Addr: s.Addr, TextStart: textStart(f, data)}, nil
	}
	if len(f.Sections) > 0 && !isGoBinary(f) {
		return nil, ErrNoPclntab
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
				return &Pclntab{Data: d, Addr: p.Vaddr + uint64(off), TextStart: textStart(f, d)}, nil
			}
		}
	}
	return nil, ErrNoPclntab
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

// textStart returns runtime.text: the 1.18+ header field when the linker
// filled it in (position-dependent builds), else the .text section or the
// first executable segment (PIE builds leave the field to a relocation).
func textStart(f *elf.File, d []byte) uint64 {
	magic := binary.LittleEndian.Uint32(d)
	if (magic == 0xfffffff1 || magic == 0xfffffff0) && d[7] == 8 && len(d) >= 32 {
		if v := binary.LittleEndian.Uint64(d[24:]); v != 0 {
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

// goTable resolves Go functions, files and lines.
type goTable struct {
	tab *gosym.Table
	// pcln is the pclntab that tab reads (kept whole: gosym reads it
	// lazily), shared with the unwind tables through Pclntabs.
	pcln *Pclntab
}

// size estimates the memory of the table without its pclntab, which the
// Pclntabs store accounts for.
func (t *goTable) size() int64 { return int64(len(t.tab.Funcs)) * 200 }

func newGoTable(p *Pclntab) (*goTable, error) {
	lt := gosym.NewLineTable(p.Data, p.TextStart)
	tab, err := gosym.NewTable(nil, lt)
	if err != nil {
		return nil, fmt.Errorf("parse pclntab: %w", err)
	}
	if len(tab.Funcs) == 0 {
		return nil, fmt.Errorf("parse pclntab: no functions: %w", ErrNoPclntab)
	}
	return &goTable{tab: tab, pcln: p}, nil
}

// lookup returns function, file and line at vaddr. Inlined frames are not
// expanded: debug/gosym does not expose the inline tree, so an inlined
// callee is reported as its outermost caller.
func (g *goTable) lookup(vaddr uint64) (fn, file string, line int, ok bool) {
	file, line, f := g.tab.PCToLine(vaddr)
	if f == nil {
		return "", "", 0, false
	}
	return f.Name, file, line, true
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
