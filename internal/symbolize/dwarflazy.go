package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// lazyDWARF answers file, line and inline lookups from DWARF without
// holding all of it. Opening indexes the compile units by address range;
// a lookup builds the tables of its unit only. libc's debug file is 4 MB
// compressed and 8.5 MB decompressed; debug/dwarf over all of it holds
// 21 MB (every unit's abbreviations parsed), its full tables 7 MB. A
// profile touches a few dozen of its 1,700 units.
//
// Each unit is read through a dwarf.Data over that unit alone: its
// entries, its abbreviation table and its line program, with the
// header's offsets into them rebased to 0, over the small sections
// (strings, ranges) whole. References within a unit are relative to it
// and still resolve. A file whose subprograms refer to other units
// (DW_FORM_ref_addr, as LTO and Go output) is read through one dwarf.Data
// over all units instead (whole).
//
// The bytes come from a source: a spill file for compressed DWARF (read
// per unit, nothing held), else the decompressed sections in memory,
// held until trim.
type lazyDWARF struct {
	// path and st name the file the DWARF is in, read again after a trim;
	// a file whose version changed is not read again.
	path  string
	st    fileStat
	order binary.ByteOrder
	// spill is the spill file read instead of path; empty without one.
	spill string
	whole bool
	stats *stats

	units []unitRange // sorted by lo
	spans []unitSpan  // by unit number

	mu     sync.Mutex
	src    source            // nil once trimmed
	small  map[string][]byte // smallSections, loaded with src
	held   int               // bytes held while loaded
	all    *dwarf.Data       // whole: over all units
	tables map[int32]*debugInfo
	used   int // bytes of tables
	failed error
}

// source is where a lazyDWARF reads section bytes.
type source interface {
	// read returns n bytes of section name from off.
	read(name string, off, n int) ([]byte, error)
	// size returns the size of section name, 0 if absent.
	size(name string) int
	close()
}

// smallSections are read whole for every unit: strings and range lists,
// addressed from anywhere by offset (libc's: 400 KB together).
var smallSections = []string{"str", "ranges", "addr", "line_str", "rnglists", "str_offsets"}

// readAheadBlock is how much of a section readAhead reads at a time.
const readAheadBlock = 64 << 10

// readAhead serves a source's reads of up to block bytes from the last
// block it read of each section, read from the offset first asked for.
// A block is never written again once read, so the slices handed out stay
// what they were, as memSource's do.
type readAhead struct {
	source
	block int
	cur   map[string]aheadBlock
}

type aheadBlock struct {
	off int
	b   []byte
}

func (r *readAhead) read(name string, off, n int) ([]byte, error) {
	c := r.cur[name]
	if off >= c.off && n >= 0 && off+n <= c.off+len(c.b) {
		i := off - c.off
		return c.b[i : i+n : i+n], nil
	}
	if n > r.block || off < 0 || off >= r.source.size(name) {
		return r.source.read(name, off, n)
	}
	b, err := r.source.read(name, off, max(n, min(r.block, r.source.size(name)-off)))
	if err != nil {
		return nil, err
	}
	if r.cur == nil {
		r.cur = map[string]aheadBlock{}
	}
	r.cur[name] = aheadBlock{off, b}
	return b[:n:n], nil
}

// unitRange is one address range of unit number unit.
type unitRange struct {
	lo, hi uint64
	unit   int32
}

// unitSpan is where a unit's bytes are: entries (header at off, end),
// abbreviation table and line program (llen 0 without one). aoffAt is
// where the header holds the abbreviation offset, from off. When whole,
// off is the offset of the unit's entry and the rest is unused.
type unitSpan struct {
	off, end   int
	aoff, alen int
	aoffAt     int
	is64       bool
	loff, llen int
}

const (
	// eagerDWARFBytes is the section size up to which every unit's
	// tables are built at once and the sections released: a small
	// binary's tables cost little, and its file may be a /proc/PID path
	// that goes away with the process, so it is never read again.
	eagerDWARFBytes = 64 << 10
	// maxUnitTableBytes bounds the unit tables one object holds; beyond
	// it, tables are dropped and built again when asked for.
	maxUnitTableBytes = 2 << 20
)

// spillOptions say where compressed DWARF is kept decompressed on disk;
// an empty dir keeps none.
type spillOptions struct {
	dir      string
	maxBytes int64
}

// newLazyDWARF indexes the compile units of ef, which is the file at path
// (version st). It returns nil, nil when ef has no DWARF lines. What was
// loaded stays until trim, so the lookups that caused the open do not
// load it again.
func newLazyDWARF(ef *elf.File, path string, st fileStat, s *stats, spill spillOptions) (*lazyDWARF, error) {
	if ef.Section(".debug_info") == nil || ef.Section(".debug_line") == nil {
		return nil, nil
	}
	if ef.Type == elf.ET_REL {
		return nil, errors.New("load DWARF: relocatable file")
	}
	if n := dwarfSize(ef); n > maxDWARFBytes {
		return nil, fmt.Errorf("load DWARF: %d bytes over the %d bound", n, maxDWARFBytes)
	}
	l := &lazyDWARF{path: path, st: st, order: ef.ByteOrder, stats: s, tables: map[int32]*debugInfo{}}
	if spill.dir != "" && compressedDWARF(ef) {
		// A spill file of this version may be there from an earlier run.
		p := filepath.Join(spill.dir, spillName(path, st))
		src, err := openSpill(p)
		if err != nil {
			if p, err = writeSpill(ef, spill.dir, spillName(path, st), spill.maxBytes); err == nil {
				src, err = openSpill(p)
			}
		}
		if err == nil {
			l.spill, l.src = p, src
		}
		// Without a spill file the sections are held and inflated again.
	}
	if l.src == nil {
		secs, err := readSections(ef)
		if err != nil {
			return nil, fmt.Errorf("load DWARF: %w", err)
		}
		l.src, l.held = memSource{secs}, secs.bytes
	}
	s.dwarfLoads.Add(1)
	if err := l.loadSmall(); err != nil {
		l.src.close()
		return nil, fmt.Errorf("load DWARF: %w", err)
	}
	if err := l.index(); err != nil {
		l.src.close()
		return nil, fmt.Errorf("load DWARF: %w", err)
	}
	if len(l.units) == 0 {
		l.src.close()
		return nil, nil
	}
	if l.held <= eagerDWARFBytes && l.spill == "" {
		for u := range l.spans {
			l.tablesLocked(int32(u))
		}
		l.trim()
	}
	return l, nil
}

// loadSmall reads smallSections from the source.
func (l *lazyDWARF) loadSmall() error {
	l.small = map[string][]byte{}
	for _, name := range smallSections {
		n := l.src.size(name)
		if n == 0 {
			continue
		}
		b, err := l.src.read(name, 0, n)
		if err != nil {
			return err
		}
		l.small[name] = b
		if _, mem := l.src.(memSource); !mem {
			l.held += n
		}
	}
	return nil
}

// newData returns a dwarf.Data over the given entries, abbreviations and
// line programs and the small sections.
func newData(abbrev, info, line []byte, small map[string][]byte) (*dwarf.Data, error) {
	d, err := dwarf.New(abbrev, nil, nil, info, line, nil, small["ranges"], small["str"])
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"addr", "line_str", "rnglists", "str_offsets"} {
		if b, ok := small[name]; ok {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// index records the address ranges of every compile unit, reading only
// the units' own entries. A unit that states no ranges is indexed by the
// sequences of its line program. A unit that cannot be read alone makes
// the whole reading the way for the file.
func (l *lazyDWARF) index() error {
	if sp, ok := l.src.(*spillSource); ok {
		// The walk reads every unit's header, the start of its entries,
		// its abbreviations and its line program's length, each section
		// in order: a few hundred bytes apiece, two preads per unit of a
		// thousand or more (libc's debug file: 2,063).
		ahead := &readAhead{source: sp, block: readAheadBlock}
		l.src = ahead
		defer func() {
			if l.src == ahead { // indexWhole may have replaced it
				l.src = sp
			}
		}()
	}
	spans, cross, err := l.unitSpans()
	if err == nil && !cross {
		if err = l.indexUnits(spans); err == nil {
			return nil
		}
	}
	l.units, l.spans = nil, nil
	return l.indexWhole()
}

// indexUnits indexes the units at spans, each through its own dwarf.Data.
func (l *lazyDWARF) indexUnits(spans []unitSpan) error {
	for _, sp := range spans {
		// The unit's own entry is all the index needs: read the start of
		// the unit, and all of it only when the entry is longer.
		d, err := l.unitHead(sp, 512, true)
		var cu *dwarf.Entry
		if err == nil {
			cu, err = d.Reader().Next()
		}
		if err != nil {
			if d, err = l.unitData(sp); err != nil {
				return err
			}
			if cu, err = d.Reader().Next(); err != nil {
				return fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
			}
		}
		if cu == nil || (cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit) {
			continue
		}
		if off, ok := cu.Val(dwarf.AttrStmtList).(int64); ok {
			if sp.loff, sp.llen, err = l.lineSpan(int(off)); err != nil {
				return fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
			}
		}
		ranges, err := d.Ranges(cu)
		if (err != nil || len(ranges) == 0) && sp.llen > 0 {
			if d, err := l.unitData(sp); err == nil {
				ranges = lineRanges(d, rebaseLines(cu))
			}
		}
		l.add(ranges, sp)
	}
	l.finishIndex()
	return nil
}

// lineSpan returns where the line program at off is and its length.
func (l *lazyDWARF) lineSpan(off int) (int, int, error) {
	b, err := l.src.read("line", off, 4)
	if err != nil {
		return 0, 0, err
	}
	n, hdr := uint64(l.order.Uint32(b)), 4
	if n == 0xffffffff {
		if b, err = l.src.read("line", off+4, 8); err != nil {
			return 0, 0, err
		}
		n, hdr = l.order.Uint64(b), 12
	}
	if n > uint64(l.src.size("line")-off-hdr) {
		return 0, 0, fmt.Errorf("line program at %#x: length %d: %w", off, n, errSectionRange)
	}
	return off, hdr + int(n), nil
}

// indexWhole indexes the units through one dwarf.Data over all of them;
// spans then hold the offsets of the units' entries.
func (l *lazyDWARF) indexWhole() error {
	if err := l.loadAll(); err != nil {
		return err
	}
	l.whole = true
	r := l.all.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			return fmt.Errorf("read DWARF: %w", err)
		}
		if cu == nil {
			break
		}
		if cu.Tag == dwarf.TagCompileUnit || cu.Tag == dwarf.TagPartialUnit {
			ranges, err := l.all.Ranges(cu)
			if err != nil || len(ranges) == 0 {
				ranges = lineRanges(l.all, cu)
			}
			l.add(ranges, unitSpan{off: int(cu.Offset)})
		}
		r.SkipChildren()
	}
	l.finishIndex()
	return nil
}

// loadAll makes the dwarf.Data over all units, for the whole reading:
// every section in memory.
func (l *lazyDWARF) loadAll() error {
	secs := &sections{m: map[string][]byte{}}
	for _, name := range dwarfSections {
		if n := l.src.size(name); n > 0 {
			b, err := l.src.read(name, 0, n)
			if err != nil {
				return err
			}
			secs.m[name] = b
			secs.bytes += n
		}
	}
	d, err := secs.data(secs.m["info"])
	if err != nil {
		return err
	}
	if _, mem := l.src.(memSource); !mem {
		l.src.close()
		l.src = memSource{secs}
	}
	l.all, l.held = d, 3*secs.bytes // the parsed abbreviations of every unit
	return nil
}

// add indexes the unit at sp with its ranges.
func (l *lazyDWARF) add(ranges [][2]uint64, sp unitSpan) {
	u := int32(len(l.spans))
	l.spans = append(l.spans, sp)
	for _, rg := range ranges {
		if rg[0] < rg[1] {
			l.units = append(l.units, unitRange{lo: rg[0], hi: rg[1], unit: u})
		}
	}
}

func (l *lazyDWARF) finishIndex() {
	sort.Slice(l.units, func(i, j int) bool { return l.units[i].lo < l.units[j].lo })
	l.units = l.units[:len(l.units):len(l.units)]
	l.spans = l.spans[:len(l.spans):len(l.spans)]
}

// unitData returns a dwarf.Data over the unit at sp alone, its entry at
// offset 0; over all units when whole, its entry at sp.off.
func (l *lazyDWARF) unitData(sp unitSpan) (*dwarf.Data, error) {
	if l.whole {
		return l.all, nil
	}
	return l.unitHead(sp, sp.end-sp.off, false)
}

// unitHead is unitData over the first max bytes of the unit only, its
// length cut to match: enough for the unit's own entry. With cuOnly, the
// abbreviation table is cut to the unit entry's own abbreviation, where
// the header and the table allow: dwarf.New parses a unit's whole table
// (a few hundred entries), which was most of indexing libc's debug file.
func (l *lazyDWARF) unitHead(sp unitSpan, max int, cuOnly bool) (*dwarf.Data, error) {
	n := min(max, sp.end-sp.off)
	info, err := l.src.read("info", sp.off, n)
	if err != nil {
		return nil, err
	}
	info = slices.Clone(info)
	if sp.is64 {
		l.order.PutUint64(info[4:], uint64(n-12))
		l.order.PutUint64(info[sp.aoffAt:], 0)
	} else {
		l.order.PutUint32(info, uint32(n-4))
		l.order.PutUint32(info[sp.aoffAt:], 0)
	}
	abbrev, err := l.src.read("abbrev", sp.aoff, sp.alen)
	if err != nil {
		return nil, err
	}
	if cuOnly {
		if code, ok := l.firstEntryCode(info, sp); ok {
			if e, ok := abbrevEntry(abbrev, code); ok {
				abbrev = append(e[:len(e):len(e)], 0)
			}
		}
	}
	var line []byte
	if sp.llen > 0 {
		if line, err = l.src.read("line", sp.loff, sp.llen); err != nil {
			return nil, err
		}
	}
	d, err := newData(abbrev, info, line, l.small)
	if err != nil {
		return nil, fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
	}
	return d, nil
}

// firstEntryCode returns the abbreviation code of the first entry of the
// unit whose start is info: false for a unit other than a compile or
// partial unit, whose header holds more fields.
func (l *lazyDWARF) firstEntryCode(info []byte, sp unitSpan) (uint64, bool) {
	lenSize, offSize := 4, 4
	if sp.is64 {
		lenSize, offSize = 12, 8
	}
	if len(info) < lenSize+3 {
		return 0, false
	}
	p := sp.aoffAt + offSize
	if l.order.Uint16(info[lenSize:]) >= 5 {
		if t := info[lenSize+2]; t != 1 && t != 3 { // DW_UT_compile, DW_UT_partial
			return 0, false
		}
	} else {
		p++ // address_size
	}
	if p >= len(info) {
		return 0, false
	}
	code, n := binary.Uvarint(info[p:])
	return code, n > 0
}

// abbrevEntry returns the entry of code in the abbreviation table b, up
// to the end of its attribute list; false when b ends first or has none.
func abbrevEntry(b []byte, code uint64) ([]byte, bool) {
	for p := 0; ; {
		c, end, ok := nextAbbrev(b, p, nil)
		if !ok || c == 0 {
			return nil, false
		}
		if c == code {
			return b[p:end], true
		}
		p = end
	}
}

// nextAbbrev reads the abbreviation entry at b[p:]: its code (0 for the
// table's terminator) and where it ends, calling spec, when not nil, with
// each attribute specification; ok is false when b ends first.
func nextAbbrev(b []byte, p int, spec func(attr, form uint64)) (code uint64, end int, ok bool) {
	code, n := uleb(b[p:])
	if n == 0 {
		return 0, 0, false
	}
	p += n
	if code == 0 {
		return 0, p, true
	}
	if _, n = uleb(b[p:]); n == 0 || p+n >= len(b) { // tag, then has-children
		return 0, 0, false
	}
	p += n + 1
	for {
		attr, n1 := uleb(b[p:])
		form, n2 := uleb(b[p+n1:])
		if n1 == 0 || n2 == 0 {
			return 0, 0, false
		}
		p += n1 + n2
		if attr == 0 && form == 0 {
			return code, p, true
		}
		if form == formImplicitConst {
			_, n3 := uleb(b[p:]) // the constant (SLEB, same length)
			if n3 == 0 {
				return 0, 0, false
			}
			p += n3
		}
		if spec != nil {
			spec(attr, form)
		}
	}
}

// uleb reads an unsigned LEB128 at the start of b: its value and length,
// 0 when b ends first.
func uleb(b []byte) (uint64, int) {
	var v uint64
	for i, shift := 0, 0; i < len(b) && shift < 64; i, shift = i+1, shift+7 {
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// rebaseLines returns cu with its line program at offset 0, where
// unitData puts it.
func rebaseLines(cu *dwarf.Entry) *dwarf.Entry {
	c := *cu
	c.Field = slices.Clone(cu.Field)
	for i := range c.Field {
		if c.Field[i].Attr == dwarf.AttrStmtList {
			c.Field[i].Val = int64(0)
		}
	}
	return &c
}

// DWARF forms and attributes unitSpans looks for in abbreviations.
const (
	formRefAddr       = 0x10
	formIndirect      = 0x16
	formImplicitConst = 0x21
	attrAbstractOrig  = 0x31
	attrSpecification = 0x47
)

// unitSpans splits .debug_info into units by their headers, finds each
// unit's abbreviation table, and reports whether any unit may refer to a
// subprogram of another (an abstract origin or specification of form
// DW_FORM_ref_addr or DW_FORM_indirect).
func (l *lazyDWARF) unitSpans() (spans []unitSpan, cross bool, err error) {
	tables := map[int]int{} // abbreviation offset → length
	size := l.src.size("info")
	for off := 0; off < size; {
		hdr, err := l.src.read("info", off, min(24, size-off))
		if err != nil || len(hdr) < 4 {
			return nil, false, fmt.Errorf("unit header at %#x truncated", off)
		}
		n, lenSize, is64 := uint64(l.order.Uint32(hdr)), 4, false
		switch {
		case n == 0xffffffff:
			if len(hdr) < 12 {
				return nil, false, fmt.Errorf("unit header at %#x truncated", off)
			}
			n, lenSize, is64 = l.order.Uint64(hdr[4:]), 12, true
		case n >= 0xfffffff0:
			return nil, false, fmt.Errorf("unit at %#x: reserved length %#x", off, n)
		}
		if n > uint64(size-off-lenSize) {
			return nil, false, fmt.Errorf("unit at %#x: length %d past the section end", off, n)
		}
		end := off + lenSize + int(n)
		if n == 0 {
			off = end // padding, as parseUnits skips it
			continue
		}
		p := lenSize + 2 // version
		need := p + 4 + 1
		if len(hdr) >= lenSize+2 && l.order.Uint16(hdr[lenSize:]) >= 5 {
			p += 2 // unit_type, address_size
			need++
		}
		if is64 {
			need += 4
		}
		if int(n)+lenSize < need || len(hdr) < need {
			return nil, false, fmt.Errorf("unit at %#x: %d bytes, too short for its header", off, n)
		}
		aoff := uint64(l.order.Uint32(hdr[p:]))
		if is64 {
			aoff = l.order.Uint64(hdr[p:])
		}
		if aoff > uint64(l.src.size("abbrev")) {
			return nil, false, fmt.Errorf("unit at %#x: abbreviations at %#x: %w", off, aoff, errSectionRange)
		}
		alen, ok := tables[int(aoff)]
		if !ok {
			var refers bool
			alen, refers = l.abbrevTable(int(aoff))
			tables[int(aoff)] = alen
			cross = cross || refers
		}
		spans = append(spans, unitSpan{off: off, end: end, aoff: int(aoff), alen: alen, aoffAt: p, is64: is64})
		off = end
	}
	return spans, cross, nil
}

// abbrevTable returns the length of the abbreviation table at off and
// whether it refers across units (refersAcross), reading more of the
// section until the table ends.
func (l *lazyDWARF) abbrevTable(off int) (int, bool) {
	size := l.src.size("abbrev")
	for n := 4096; ; n *= 2 {
		n = min(n, size-off)
		b, err := l.src.read("abbrev", off, n)
		if err != nil {
			return 0, true
		}
		length, refers, complete := refersAcross(b)
		if complete || off+n >= size {
			return length, refers || !complete
		}
	}
}

// refersAcross scans an abbreviation table for an abstract origin or
// specification that may point into another unit, and returns the
// table's length. complete is false when b ends before the table does.
func refersAcross(b []byte) (length int, refers, complete bool) {
	spec := func(attr, form uint64) {
		if (attr == attrAbstractOrig || attr == attrSpecification) && (form == formRefAddr || form == formIndirect) {
			refers = true
		}
	}
	for p := 0; ; {
		code, end, ok := nextAbbrev(b, p, spec)
		if !ok {
			return len(b), refers, false
		}
		if code == 0 {
			return end, refers, true
		}
		p = end
	}
}

// lineRanges returns the address ranges of a unit's line sequences.
func lineRanges(d *dwarf.Data, cu *dwarf.Entry) [][2]uint64 {
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return nil
	}
	var out [][2]uint64
	var e dwarf.LineEntry
	var lo uint64
	start := true
	for {
		if err := lr.Next(&e); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil
			}
			return out
		}
		if start {
			lo, start = e.Address, false
		}
		if e.EndSequence {
			out = append(out, [2]uint64{lo, e.Address})
			start = true
		}
	}
}

// locations returns the source positions at vaddr, innermost first, as
// debugInfo.locations does; nil when no unit covers vaddr or its DWARF
// cannot be read any more.
func (l *lazyDWARF) locations(vaddr uint64) []location {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.units), func(i int) bool { return l.units[i].lo > vaddr })
	// Units rarely overlap; look back a little for one that does.
	for j := i - 1; j >= 0 && j >= i-maxOverlap; j-- {
		if vaddr >= l.units[j].hi {
			continue
		}
		t := l.tablesLocked(l.units[j].unit)
		if t == nil {
			return nil
		}
		if locs := t.locations(vaddr); len(locs) > 0 {
			return locs
		}
	}
	return nil
}

// tablesLocked returns the tables of unit u, building them (and loading
// the source) when needed.
func (l *lazyDWARF) tablesLocked(u int32) *debugInfo {
	if t, ok := l.tables[u]; ok {
		return t
	}
	if !l.loadLocked() {
		return nil
	}
	sp := l.spans[u]
	d, err := l.unitData(sp)
	var t *debugInfo
	if err == nil {
		if l.whole {
			t, err = unitTables(d, dwarf.Offset(sp.off), false)
		} else {
			t, err = unitTables(d, 0, true)
		}
	}
	if err != nil {
		// Keep the unit's failure: an empty table answers nothing.
		l.stats.dwarfErrors.Add(1)
		t = &debugInfo{}
	}
	n := t.size()
	for k, old := range l.tables {
		if l.used+n <= maxUnitTableBytes {
			break
		}
		l.used -= old.size()
		delete(l.tables, k)
	}
	l.tables[u] = t
	l.used += n
	return t
}

// loadLocked makes sure the source is open, after a trim reading the
// spill file or the file again. It fails for good once they changed or
// went.
func (l *lazyDWARF) loadLocked() bool {
	if l.src != nil {
		return true
	}
	if l.failed != nil {
		return false
	}
	if err := l.reload(); err != nil {
		l.failed = err
		l.stats.dwarfErrors.Add(1)
		return false
	}
	l.stats.dwarfLoads.Add(1)
	return true
}

func (l *lazyDWARF) reload() error {
	l.held = 0
	if l.spill != "" {
		if src, err := openSpill(l.spill); err == nil {
			l.src = src
		} else {
			l.spill = "" // gone or damaged: read the file itself
		}
	}
	if l.src == nil {
		secs, err := l.readFile()
		if err != nil {
			return err
		}
		l.src, l.held = memSource{secs}, secs.bytes
	}
	if err := l.loadSmall(); err != nil {
		return fmt.Errorf("reload DWARF of %s: %w", l.path, err)
	}
	if l.whole {
		if err := l.loadAll(); err != nil {
			return fmt.Errorf("reload DWARF of %s: %w", l.path, err)
		}
	}
	return nil
}

// readFile reads the sections from the file again, if it is the version
// indexed.
func (l *lazyDWARF) readFile() (*sections, error) {
	st, err := statFile(l.path)
	if err != nil {
		return nil, err
	}
	if st != l.st {
		return nil, fmt.Errorf("reload DWARF of %s: the file changed", l.path)
	}
	ef, err := elf.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("reload DWARF: %w", err)
	}
	defer ef.Close()
	secs, err := readSections(ef)
	if err != nil {
		return nil, fmt.Errorf("reload DWARF of %s: %w", l.path, err)
	}
	return secs, nil
}

// trim releases what was loaded.
func (l *lazyDWARF) trim() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.src != nil {
		l.src.close()
	}
	l.src, l.small, l.all, l.held = nil, nil, nil, 0
}

// size estimates the bytes held: the unit index, the built tables and
// what is loaded.
func (l *lazyDWARF) size() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.units)*24 + len(l.spans)*72 + l.used + l.held
}
