package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// noFile marks a line row that ends a sequence: addresses from there on
// belong to no line until the next row.
const noFile = ^uint32(0)

// lineRow is one row of the DWARF line program, compacted: 16 bytes
// instead of a dwarf.LineEntry's ~100, since only address, file and line
// are needed to answer lookups.
type lineRow struct {
	addr uint64
	file uint32 // index into debugInfo.files, or noFile
	line uint32
}

// inlinedRange is one address range of an inlined subroutine.
type inlinedRange struct {
	lo, hi   uint64
	name     string
	callFile uint32
	callLine uint32
	depth    uint16 // 1 for a subroutine inlined into the function itself
}

// funcRange is one address range of a concrete function and the inlined
// subroutines within it, inl[first:last].
type funcRange struct {
	lo, hi      uint64
	name        string
	first, last int32
}

// debugInfo is what an object keeps of one compile unit's DWARF: file and
// line of every address and the inlined call chains (lazyDWARF builds it
// when an address of the unit is first looked up).
type debugInfo struct {
	files []string
	rows  []lineRow
	funcs []funcRange // sorted by lo
	inl   []inlinedRange
}

// location is one source position; the innermost comes first in lookups.
type location struct {
	function string
	file     string
	line     int
}

// maxDWARFBytes bounds the DWARF an object may hold in memory while its
// tables are built; bigger debug files keep symbols without lines.
const maxDWARFBytes = 256 << 20

// dwarfSize sums the sizes of the DWARF sections the tables are built from.
func dwarfSize(ef *elf.File) uint64 {
	var n uint64
	for _, s := range ef.Sections {
		if strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			n += s.Size
		}
	}
	return n
}

// dwarfSections are the sections lookups read: entries, abbreviations,
// strings, line programs and address ranges. Location lists, types,
// frames and name indexes are not needed for file, line and inlined
// names, so they are neither decompressed nor held.
var dwarfSections = []string{"abbrev", "info", "str", "line", "ranges", "addr", "line_str", "rnglists", "str_offsets"}

// sections is the decompressed data of dwarfSections, by name. bytes
// counts what is on the heap; the sections stored uncompressed are
// mapped from the file instead (maps keeps the mappings, and the data
// in m points into them), resident only in the pages touched, which
// close releases.
type sections struct {
	m     map[string][]byte
	bytes int
	maps  []*elfmap.Section
}

// readSections reads dwarfSections of ef, mapping those stored as they
// are and decompressing the others.
func readSections(ef *elf.File) (*sections, error) {
	secs := &sections{m: map[string][]byte{}}
	for _, s := range ef.Sections {
		name, ok := dwarfSectionOf(s)
		if !ok {
			continue
		}
		if m, ok := elfmap.Map(s); ok {
			secs.m[name] = m.Data
			secs.maps = append(secs.maps, m)
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Name, err)
		}
		secs.m[name] = b
		secs.bytes += len(b)
	}
	return secs, nil
}

// data returns a dwarf.Data over the sections with info as .debug_info:
// the whole section, or one unit of it (see lazyDWARF).
func (s *sections) data(info []byte) (*dwarf.Data, error) {
	m := s.m
	d, err := dwarf.New(m["abbrev"], nil, nil, info, m["line"], nil, m["ranges"], m["str"])
	if err != nil {
		return nil, err
	}
	for _, name := range dwarfSections[5:] {
		if b, ok := m[name]; ok {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// unitTables builds the line and inline tables of the compile unit whose
// entry is at off; rebase says its line program is at offset 0 of d's
// line section (lazyDWARF.unitData).
func unitTables(d *dwarf.Data, off dwarf.Offset, rebase bool) (*debugInfo, error) {
	r := d.Reader()
	r.Seek(off)
	cu, err := r.Next()
	if err != nil {
		return nil, fmt.Errorf("read DWARF: %w", err)
	}
	if cu == nil {
		return nil, fmt.Errorf("read DWARF: no unit at %#x", off)
	}
	b := dwarfBuilder{d: d, di: &debugInfo{}, fileIdx: map[string]uint32{}, names: map[dwarf.Offset]string{}}
	lcu := cu
	if rebase {
		lcu = rebaseLines(cu)
	}
	files, err := b.lines(lcu)
	if err != nil {
		return nil, err
	}
	if err := b.unit(r, cu, files); err != nil {
		return nil, err
	}
	return b.finish(), nil
}

type dwarfBuilder struct {
	d       *dwarf.Data
	di      *debugInfo
	fileIdx map[string]uint32
	// names of subprograms by offset, for abstract origins and
	// specifications, which may come after their users.
	names map[dwarf.Offset]string
	// pending inlined ranges and function ranges carry origin offsets until
	// the walk has seen every name.
	inlOrigin  []dwarf.Offset
	funcOrigin []dwarf.Offset
}

func (b *dwarfBuilder) file(name string) uint32 {
	if i, ok := b.fileIdx[name]; ok {
		return i
	}
	i := uint32(len(b.di.files))
	b.di.files = append(b.di.files, name)
	b.fileIdx[name] = i
	return i
}

// lines appends the unit's line rows and returns its file table mapped to
// debugInfo file indexes, for DW_AT_call_file.
func (b *dwarfBuilder) lines(cu *dwarf.Entry) ([]uint32, error) {
	lr, err := b.d.LineReader(cu)
	if err != nil {
		return nil, fmt.Errorf("read line table: %w", err)
	}
	if lr == nil {
		return nil, nil
	}
	var files []uint32
	for _, f := range lr.Files() {
		if f == nil {
			files = append(files, noFile)
			continue
		}
		files = append(files, b.file(f.Name))
	}
	var e dwarf.LineEntry
	for {
		if err := lr.Next(&e); err != nil {
			if errors.Is(err, io.EOF) {
				return files, nil
			}
			return nil, fmt.Errorf("read line table: %w", err)
		}
		if e.EndSequence {
			b.di.rows = append(b.di.rows, lineRow{addr: e.Address, file: noFile})
			continue
		}
		fi := noFile
		if e.File != nil {
			fi = b.file(e.File.Name)
		}
		b.di.rows = append(b.di.rows, lineRow{addr: e.Address, file: fi, line: uint32(e.Line)})
	}
}

// unit walks the children of a compile unit, keeping a stack of the
// enclosing subprogram and inlined subroutines.
func (b *dwarfBuilder) unit(r *dwarf.Reader, cu *dwarf.Entry, files []uint32) error {
	if !cu.Children {
		return nil
	}
	type open struct {
		tag     dwarf.Tag
		fn      int // index in di.funcs of the first range, or -1
		nfn     int
		inlined bool
	}
	var stack []open
	depth := 0 // inlined nesting of the top of the stack
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("read DWARF: %w", err)
		}
		if e == nil {
			return nil
		}
		if e.Tag == 0 { // end of children
			if len(stack) == 0 {
				return nil
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.inlined {
				depth--
			}
			if top.fn >= 0 {
				for i := top.fn; i < top.fn+top.nfn; i++ {
					b.di.funcs[i].last = int32(len(b.di.inl))
				}
			}
			continue
		}
		switch e.Tag {
		case dwarf.TagSubprogram:
			if name := entryName(e); name != "" {
				b.names[e.Offset] = name
			}
		}
		o := open{tag: e.Tag, fn: -1}
		inFunc := false
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i].fn >= 0 {
				inFunc = true
				break
			}
		}
		switch {
		case e.Tag == dwarf.TagSubprogram && !inFunc:
			ranges, _ := b.d.Ranges(e)
			if len(ranges) > 0 {
				o.fn, o.nfn = len(b.di.funcs), len(ranges)
				origin := originOf(e)
				for _, rg := range ranges {
					b.di.funcs = append(b.di.funcs, funcRange{lo: rg[0], hi: rg[1], name: entryName(e),
						first: int32(len(b.di.inl)), last: int32(len(b.di.inl))})
					b.funcOrigin = append(b.funcOrigin, origin)
				}
			}
		case e.Tag == dwarf.TagInlinedSubroutine && inFunc:
			o.inlined = true
			depth++
			ranges, _ := b.d.Ranges(e)
			cf := noFile
			if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok && v >= 0 && int(v) < len(files) {
				cf = files[v]
			}
			cl, _ := e.Val(dwarf.AttrCallLine).(int64)
			for _, rg := range ranges {
				b.di.inl = append(b.di.inl, inlinedRange{lo: rg[0], hi: rg[1], callFile: cf,
					callLine: uint32(cl), depth: uint16(depth)})
				b.inlOrigin = append(b.inlOrigin, originOf(e))
			}
		}
		if e.Children {
			stack = append(stack, o)
		} else if o.inlined {
			depth--
		}
	}
}

// finish resolves names through abstract origins and sorts the tables.
func (b *dwarfBuilder) finish() *debugInfo {
	di := b.di
	for i, off := range b.inlOrigin {
		di.inl[i].name = b.resolve(off)
	}
	for i, off := range b.funcOrigin {
		if di.funcs[i].name == "" {
			di.funcs[i].name = b.resolve(off)
		}
	}
	// End-of-sequence rows sort before a sequence starting at the same
	// address, so the last row at or below an address is the live one.
	sort.SliceStable(di.rows, func(i, j int) bool {
		if di.rows[i].addr != di.rows[j].addr {
			return di.rows[i].addr < di.rows[j].addr
		}
		return di.rows[i].file == noFile && di.rows[j].file != noFile
	})
	sort.SliceStable(di.funcs, func(i, j int) bool { return di.funcs[i].lo < di.funcs[j].lo })
	di.rows = di.rows[:len(di.rows):len(di.rows)]
	return di
}

// resolve follows abstract_origin/specification offsets to a name.
func (b *dwarfBuilder) resolve(off dwarf.Offset) string {
	for range 4 {
		if off == 0 {
			return ""
		}
		if n, ok := b.names[off]; ok {
			return n
		}
		r := b.d.Reader()
		r.Seek(off)
		e, err := r.Next()
		if err != nil || e == nil {
			return ""
		}
		if n := entryName(e); n != "" {
			b.names[off] = n
			return n
		}
		off = originOf(e)
	}
	return ""
}

// entryName prefers the demangled linkage name, which carries C++
// namespaces and parameter types like the symbol table's names do.
func entryName(e *dwarf.Entry) string {
	for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, dwarf.Attr(0x2007)} { // DW_AT_MIPS_linkage_name
		if ln, ok := e.Val(a).(string); ok && ln != "" {
			return demangle.Filter(ln, demangle.NoClones)
		}
	}
	n, _ := e.Val(dwarf.AttrName).(string)
	return n
}

func originOf(e *dwarf.Entry) dwarf.Offset {
	if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
		return o
	}
	if o, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
		return o
	}
	return 0
}

// line returns the file and line of vaddr from the line table.
func (di *debugInfo) line(vaddr uint64) (string, int, bool) {
	i := sort.Search(len(di.rows), func(i int) bool { return di.rows[i].addr > vaddr })
	if i == 0 {
		return "", 0, false
	}
	r := di.rows[i-1]
	if r.file == noFile {
		return "", 0, false
	}
	return di.files[r.file], int(r.line), true
}

// function returns the concrete function range containing vaddr.
func (di *debugInfo) function(vaddr uint64) (*funcRange, bool) {
	i := sort.Search(len(di.funcs), func(i int) bool { return di.funcs[i].lo > vaddr })
	for j := i - 1; j >= 0 && j >= i-maxOverlap; j-- {
		if vaddr < di.funcs[j].hi {
			return &di.funcs[j], true
		}
	}
	return nil, false
}

// locations returns the source positions at vaddr, innermost first: one
// per inlined subroutine, then the function itself. The function's name
// is left empty when DWARF does not know it, for the caller to fill from
// the symbol table.
func (di *debugInfo) locations(vaddr uint64) []location {
	file, line, ok := di.line(vaddr)
	if !ok {
		return nil
	}
	fr, ok := di.function(vaddr)
	if !ok {
		return []location{{file: file, line: line}}
	}
	var chain []*inlinedRange
	for k := fr.first; k < fr.last; k++ {
		in := &di.inl[k]
		if vaddr >= in.lo && vaddr < in.hi {
			chain = append(chain, in)
		}
	}
	sort.SliceStable(chain, func(i, j int) bool { return chain[i].depth > chain[j].depth })
	out := make([]location, 0, len(chain)+1)
	for _, in := range chain {
		out = append(out, location{function: in.name, file: file, line: line})
		file, line = "", int(in.callLine)
		if in.callFile != noFile {
			file = di.files[in.callFile]
		}
	}
	return append(out, location{function: fr.name, file: file, line: line})
}

// size estimates the bytes the tables hold, for cache accounting.
func (di *debugInfo) size() int {
	if di == nil {
		return 0
	}
	n := len(di.rows)*16 + len(di.funcs)*48 + len(di.inl)*56
	for _, f := range di.files {
		n += len(f) + 16
	}
	return n
}
