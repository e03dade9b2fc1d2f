package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
)

// lazyDWARF answers file, line and inline lookups from DWARF without
// holding all of it. Opening indexes the compile units by address range;
// a lookup builds the tables of its unit only, from section data that is
// loaded on demand and released by trim. libc's debug file is 4 MB
// compressed and 8.5 MB decompressed; debug/dwarf over all of it holds
// 21 MB (every unit's abbreviations parsed), its full tables 7 MB. A
// profile touches a few dozen of its 1,700 units.
//
// Each unit is read through a dwarf.Data over that unit alone, so only
// its abbreviations are parsed. References within a unit are relative
// to it and still resolve; a file whose subprograms refer to other units
// (DW_FORM_ref_addr, as LTO output does) is read through one dwarf.Data
// over all units instead (whole).
type lazyDWARF struct {
	// path and st name the file the DWARF is in, reopened after a trim;
	// a file whose version changed is not read again.
	path  string
	st    fileStat
	order binary.ByteOrder
	// spill is the file holding the decompressed sections, read instead
	// of inflating path's again; empty without one.
	spill string
	// keep holds the section data for good: it is small, and the file
	// may be a /proc/PID path that goes away with the process.
	keep  bool
	whole bool
	stats *stats

	units []unitRange // sorted by lo
	spans []unitSpan  // by unit number

	mu     sync.Mutex
	secs   *sections   // nil once trimmed
	all    *dwarf.Data // whole: over all units, nil once trimmed
	tables map[int32]*debugInfo
	used   int // bytes of tables
	failed error
}

// unitRange is one address range of unit number unit.
type unitRange struct {
	lo, hi uint64
	unit   int32
}

// unitSpan is where a unit is in .debug_info: its header at off, its
// end. When whole, off is the offset of the unit's entry and end unused.
type unitSpan struct {
	off, end int
}

const (
	// keepDWARFBytes is the section size below which the data stays
	// loaded: a small binary's DWARF costs less than the index of a big one.
	keepDWARFBytes = 64 << 10
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
// (version st). It returns nil, nil when ef has no DWARF lines. The
// section data stays loaded until trim, so the lookups that caused the
// open do not load it again.
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
	secs, err := readSections(ef)
	if err != nil {
		return nil, fmt.Errorf("load DWARF: %w", err)
	}
	s.dwarfLoads.Add(1)
	l := &lazyDWARF{path: path, st: st, order: ef.ByteOrder, keep: secs.bytes <= keepDWARFBytes, stats: s,
		secs: secs, tables: map[int32]*debugInfo{}}
	if err := l.index(); err != nil {
		return nil, fmt.Errorf("load DWARF: %w", err)
	}
	if len(l.units) == 0 {
		return nil, nil
	}
	if secs.compressed && !l.keep && spill.dir != "" {
		name := spillName(path, st)
		if err := writeSpill(spill.dir, name, secs, spill.maxBytes); err == nil {
			l.spill = filepath.Join(spill.dir, name)
		}
		// Without a spill file the sections are inflated again instead.
	}
	return l, nil
}

// index records the address ranges of every compile unit, reading only
// the units' own entries. A unit that states no ranges is indexed by the
// sequences of its line program. A unit that cannot be read alone makes
// the whole reading the way for the file.
func (l *lazyDWARF) index() error {
	spans, cross, err := unitSpans(l.secs.m["info"], l.secs.m["abbrev"], l.order)
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
		d, err := l.secs.data(l.secs.m["info"][sp.off:sp.end])
		if err != nil {
			return fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
		}
		r := d.Reader()
		cu, err := r.Next()
		if err != nil {
			return fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
		}
		l.add(d, cu, sp)
	}
	l.finishIndex()
	return nil
}

// indexWhole indexes the units through one dwarf.Data over all of them;
// spans then hold the offsets of the units' entries.
func (l *lazyDWARF) indexWhole() error {
	d, err := l.secs.data(l.secs.m["info"])
	if err != nil {
		return err
	}
	l.whole, l.all = true, d
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			return fmt.Errorf("read DWARF: %w", err)
		}
		if cu == nil {
			break
		}
		l.add(d, cu, unitSpan{off: int(cu.Offset)})
		r.SkipChildren()
	}
	l.finishIndex()
	return nil
}

// add indexes the unit whose entry is cu, if it is a compile unit.
func (l *lazyDWARF) add(d *dwarf.Data, cu *dwarf.Entry, sp unitSpan) {
	if cu == nil || (cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit) {
		return
	}
	ranges, err := d.Ranges(cu)
	if err != nil || len(ranges) == 0 {
		ranges = lineRanges(d, cu)
	}
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

// unitData returns a dwarf.Data that holds the unit at sp and the offset
// of that Data's .debug_info in the real section (0 when whole): the
// unit's entry is at sp.off minus that.
func (l *lazyDWARF) unitData(sp unitSpan) (*dwarf.Data, int, error) {
	if l.whole {
		return l.all, 0, nil
	}
	d, err := l.secs.data(l.secs.m["info"][sp.off:sp.end])
	if err != nil {
		return nil, 0, fmt.Errorf("read DWARF unit at %#x: %w", sp.off, err)
	}
	return d, sp.off, nil
}

// DWARF forms and attributes unitSpans looks for in abbreviations.
const (
	formRefAddr       = 0x10
	formIndirect      = 0x16
	formImplicitConst = 0x21
	attrAbstractOrig  = 0x31
	attrSpecification = 0x47
)

// unitSpans splits .debug_info into units by their headers and reports
// whether any unit may refer to a subprogram of another (an abstract
// origin or specification of form DW_FORM_ref_addr or DW_FORM_indirect
// in its abbreviations).
func unitSpans(info, abbrev []byte, order binary.ByteOrder) (spans []unitSpan, cross bool, err error) {
	checked := map[uint64]bool{}
	for off := 0; off < len(info); {
		if len(info)-off < 4 {
			return nil, false, fmt.Errorf("unit header at %#x truncated", off)
		}
		n, hdr, is64 := uint64(order.Uint32(info[off:])), 4, false
		switch {
		case n == 0xffffffff:
			if len(info)-off < 12 {
				return nil, false, fmt.Errorf("unit header at %#x truncated", off)
			}
			n, hdr, is64 = order.Uint64(info[off+4:]), 12, true
		case n >= 0xfffffff0:
			return nil, false, fmt.Errorf("unit at %#x: reserved length %#x", off, n)
		}
		if n > uint64(len(info)-off-hdr) {
			return nil, false, fmt.Errorf("unit at %#x: length %d past the section end", off, n)
		}
		end := off + hdr + int(n)
		p := off + hdr
		if n == 0 {
			off = end // padding, as parseUnits skips it
			continue
		}
		need := 2 + 4 + 1 // version, debug_abbrev_offset, address_size
		if is64 {
			need += 4
		}
		if n >= 2 && order.Uint16(info[p:]) >= 5 {
			need++ // unit_type
		}
		if int(n) < need {
			return nil, false, fmt.Errorf("unit at %#x: %d bytes, too short for its header", off, n)
		}
		if order.Uint16(info[p:]) >= 5 {
			p += 2 // unit_type, address_size
		}
		p += 2
		aoff := uint64(order.Uint32(info[p:]))
		if is64 {
			aoff = order.Uint64(info[p:])
		}
		if !checked[aoff] {
			checked[aoff] = true
			cross = cross || refersAcross(abbrev, aoff)
		}
		spans = append(spans, unitSpan{off: off, end: end})
		off = end
	}
	return spans, cross, nil
}

// refersAcross scans the abbreviation table at off for an abstract
// origin or specification that may point into another unit. A table it
// cannot read counts as one that does: the whole reading is always right.
func refersAcross(abbrev []byte, off uint64) bool {
	if off >= uint64(len(abbrev)) {
		return true
	}
	b := abbrev[off:]
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := 0; len(b) > 0 && shift < 64; shift += 7 {
			c := b[0]
			b = b[1:]
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	for {
		code, ok := uleb()
		if !ok {
			return true
		}
		if code == 0 {
			return false
		}
		if _, ok := uleb(); !ok || len(b) == 0 { // tag, then has-children
			return true
		}
		b = b[1:]
		for {
			attr, ok1 := uleb()
			form, ok2 := uleb()
			if !ok1 || !ok2 {
				return true
			}
			if attr == 0 && form == 0 {
				break
			}
			if form == formImplicitConst {
				if _, ok := uleb(); !ok { // the constant (SLEB, same length)
					return true
				}
			}
			if (attr == attrAbstractOrig || attr == attrSpecification) && (form == formRefAddr || form == formIndirect) {
				return true
			}
		}
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
// the section data) when needed.
func (l *lazyDWARF) tablesLocked(u int32) *debugInfo {
	if t, ok := l.tables[u]; ok {
		return t
	}
	if !l.loadLocked() {
		return nil
	}
	sp := l.spans[u]
	d, base, err := l.unitData(sp)
	var t *debugInfo
	if err == nil {
		t, err = unitTables(d, dwarf.Offset(sp.off-base))
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

// loadLocked makes sure the section data is loaded, reading the file
// again after a trim. It fails for good once the file changed or went.
func (l *lazyDWARF) loadLocked() bool {
	if l.secs != nil {
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
	if l.spill != "" {
		secs, err := readSpill(l.spill)
		if err == nil {
			return l.setSections(secs)
		}
		l.spill = "" // gone or damaged: read the debug file itself
	}
	st, err := statFile(l.path)
	if err != nil {
		return err
	}
	if st != l.st {
		return fmt.Errorf("reload DWARF of %s: the file changed", l.path)
	}
	ef, err := elf.Open(l.path)
	if err != nil {
		return fmt.Errorf("reload DWARF: %w", err)
	}
	defer ef.Close()
	secs, err := readSections(ef)
	if err != nil {
		return fmt.Errorf("reload DWARF of %s: %w", l.path, err)
	}
	return l.setSections(secs)
}

// setSections makes secs the loaded data.
func (l *lazyDWARF) setSections(secs *sections) error {
	if l.whole {
		d, err := secs.data(secs.m["info"])
		if err != nil {
			return fmt.Errorf("reload DWARF of %s: %w", l.path, err)
		}
		l.all = d
	}
	l.secs = secs
	return nil
}

// trim releases the section data unless it is small enough to keep.
func (l *lazyDWARF) trim() {
	if l == nil || l.keep {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.secs, l.all = nil, nil
}

// size estimates the bytes held: the unit index, the built tables and
// the section data while loaded (three times over when whole, for the
// parsed abbreviations of every unit).
func (l *lazyDWARF) size() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.units)*24 + len(l.spans)*16 + l.used
	if l.secs != nil {
		n += l.secs.bytes
		if l.all != nil {
			n += 2 * l.secs.bytes
		}
	}
	return n
}
