package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
)

// lazyDWARF answers file, line and inline lookups from DWARF without
// holding all of it. Opening indexes the compile units by address range;
// a lookup builds the tables of its unit only, from section data that is
// loaded on demand and released by trim. libc's debug file is 4 MB
// compressed and 10 MB decompressed, its full tables 7 MB: a profile
// touches a few dozen of its 1,700 units.
type lazyDWARF struct {
	// path and st name the file the DWARF is in, reopened after a trim;
	// a file whose version changed is not read again.
	path string
	st   fileStat
	// keep holds the section data for good: it is small, and the file
	// may be a /proc/PID path that goes away with the process.
	keep  bool
	stats *stats

	units  []unitRange // sorted by lo
	starts []dwarf.Offset

	mu     sync.Mutex
	data   *dwarf.Data // nil once trimmed
	bytes  int         // decompressed size of the loaded sections
	tables map[int32]*debugInfo
	used   int // bytes of tables
	// built is set when a unit's tables were built since the last trim.
	built  bool
	failed error
}

// unitRange is one address range of the compile unit starts[unit].
type unitRange struct {
	lo, hi uint64
	unit   int32
}

const (
	// keepDWARFBytes is the section size below which the data stays
	// loaded: a small binary's DWARF costs less than the index of a big one.
	keepDWARFBytes = 64 << 10
	// maxUnitTableBytes bounds the unit tables one object holds; beyond
	// it, tables are dropped and built again when asked for.
	maxUnitTableBytes = 2 << 20
)

// newLazyDWARF indexes the compile units of ef, which is the file at path
// (version st). It returns nil, nil when ef has no DWARF lines. The
// section data stays loaded until trim, so the lookups that caused the
// open do not load it again.
func newLazyDWARF(ef *elf.File, path string, st fileStat, s *stats) (*lazyDWARF, error) {
	if ef.Section(".debug_info") == nil || ef.Section(".debug_line") == nil {
		return nil, nil
	}
	if n := dwarfSize(ef); n > maxDWARFBytes {
		return nil, fmt.Errorf("load DWARF: %d bytes over the %d bound", n, maxDWARFBytes)
	}
	d, n, err := loadDWARF(ef)
	if err != nil {
		return nil, fmt.Errorf("load DWARF: %w", err)
	}
	s.dwarfLoads.Add(1)
	l := &lazyDWARF{path: path, st: st, keep: n <= keepDWARFBytes, stats: s,
		data: d, bytes: n, tables: map[int32]*debugInfo{}}
	if err := l.index(d); err != nil {
		return nil, err
	}
	if len(l.units) == 0 {
		return nil, nil
	}
	return l, nil
}

// index records the address ranges of every compile unit, reading only
// the units' own entries. A unit that states no ranges is indexed by the
// sequences of its line program.
func (l *lazyDWARF) index(d *dwarf.Data) error {
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			return fmt.Errorf("read DWARF: %w", err)
		}
		if cu == nil {
			break
		}
		if cu.Tag == dwarf.TagCompileUnit || cu.Tag == dwarf.TagPartialUnit {
			ranges, err := d.Ranges(cu)
			if err != nil || len(ranges) == 0 {
				ranges = lineRanges(d, cu)
			}
			u := int32(len(l.starts))
			l.starts = append(l.starts, cu.Offset)
			for _, rg := range ranges {
				if rg[0] < rg[1] {
					l.units = append(l.units, unitRange{lo: rg[0], hi: rg[1], unit: u})
				}
			}
		}
		r.SkipChildren()
	}
	sort.Slice(l.units, func(i, j int) bool { return l.units[i].lo < l.units[j].lo })
	l.units = l.units[:len(l.units):len(l.units)]
	return nil
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
	d := l.dataLocked()
	if d == nil {
		return nil
	}
	t, err := unitTables(d, l.starts[u])
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
	l.built = true
	return t
}

// dataLocked returns the section data, loading it again after a trim.
func (l *lazyDWARF) dataLocked() *dwarf.Data {
	if l.data != nil || l.failed != nil {
		return l.data
	}
	d, n, err := l.reload()
	if err != nil {
		l.failed = err
		l.stats.dwarfErrors.Add(1)
		return nil
	}
	l.stats.dwarfLoads.Add(1)
	l.data, l.bytes = d, n
	return d
}

func (l *lazyDWARF) reload() (*dwarf.Data, int, error) {
	st, err := statFile(l.path)
	if err != nil {
		return nil, 0, err
	}
	if st != l.st {
		return nil, 0, fmt.Errorf("reload DWARF of %s: the file changed", l.path)
	}
	ef, err := elf.Open(l.path)
	if err != nil {
		return nil, 0, fmt.Errorf("reload DWARF: %w", err)
	}
	defer ef.Close()
	d, n, err := loadDWARF(ef)
	if err != nil {
		return nil, 0, fmt.Errorf("reload DWARF of %s: %w", l.path, err)
	}
	return d, n, nil
}

// trim releases the section data unless it is small enough to keep, or
// was needed for new units since the last trim: then new units are
// likely to come in the next batch too (a new workload warming up), and
// one more loaded interval is cheaper than loading again.
func (l *lazyDWARF) trim() {
	if l == nil || l.keep {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.built {
		l.built = false
		return
	}
	l.data, l.bytes = nil, 0
}

// size estimates the bytes held: the unit index, the built tables and
// the section data while loaded.
func (l *lazyDWARF) size() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.units)*24 + len(l.starts)*8 + l.used + l.bytes
}
