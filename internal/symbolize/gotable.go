package symbolize

import (
	"debug/gosym"
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"sync"

	"github.com/spanprof/spanprof/internal/elfmap"
	"github.com/spanprof/spanprof/internal/gopclntab"
)

// goTable resolves Go functions, files and lines. Go 1.18+ pclntabs are
// read in place at each lookup (a binary search of the function table,
// then the function's pc-value tables): nothing is decoded ahead, so a
// binary of a hundred thousand functions costs no parse and no memory
// beyond its pclntab. Older pclntabs go through debug/gosym, which builds
// every function up front.
type goTable struct {
	lazy *goLazy
	tab  *gosym.Table
	// pcln is the pclntab that the table reads (kept whole), shared with
	// the unwind tables through a gopclntab.Store.
	pcln *gopclntab.Table
}

// size estimates the memory of the table without its pclntab, which the
// gopclntab.Store accounts for.
func (t *goTable) size() int64 {
	if t.lazy != nil {
		return 256 + t.lazy.namesSize()
	}
	return int64(len(t.tab.Funcs)) * 200
}

func newGoTable(p *gopclntab.Table) (*goTable, error) {
	if l, err := newGoLazy(p); err == nil {
		if l.nfunc == 0 {
			return nil, fmt.Errorf("parse pclntab: no functions: %w", gopclntab.ErrNotFound)
		}
		return &goTable{lazy: l, pcln: p}, nil
	}
	lt := gosym.NewLineTable(p.Data, p.TextStart)
	tab, err := gosym.NewTable(nil, lt)
	if err != nil {
		return nil, fmt.Errorf("parse pclntab: %w", err)
	}
	if len(tab.Funcs) == 0 {
		return nil, fmt.Errorf("parse pclntab: no functions: %w", gopclntab.ErrNotFound)
	}
	return &goTable{tab: tab, pcln: p}, nil
}

// lookup returns function, file and line at vaddr. Inlined frames are not
// expanded: an inlined callee is reported as its outermost caller.
func (g *goTable) lookup(vaddr uint64) (fn, file string, line int, ok bool) {
	defer runtime.KeepAlive(g) // g.pcln may be a mapping its slices do not hold
	defer elfmap.Recover(elfmap.Guard(), &ok)
	if g.lazy != nil {
		return g.lazy.lookup(vaddr)
	}
	file, line, f := g.tab.PCToLine(vaddr)
	if f == nil {
		return "", "", 0, false
	}
	return f.Name, file, line, true
}

// covers reports whether the Go function table holds vaddr.
func (g *goTable) covers(vaddr uint64) (ok bool) {
	defer runtime.KeepAlive(g)
	defer elfmap.Recover(elfmap.Guard(), &ok)
	if g.lazy != nil {
		_, ok := g.lazy.find(vaddr)
		return ok
	}
	return g.tab.PCToFunc(vaddr) != nil
}

// goLazy reads a Go 1.18+ pclntab (runtime/symtab.go's pcHeader, _func
// and pc-value encoding) without decoding it ahead.
type goLazy struct {
	data      []byte
	textStart uint64
	nfunc     int
	quantum   uint64
	funcnames []byte
	cutab     []byte
	filetab   []byte
	pctab     []byte
	funcdata  []byte // from pclnOffset on; functab is its start
	go120     bool   // Go 1.20+ (_func has startLine)
	// pcln owns data (a mapping, unmapped once unreachable): lookup and
	// find keep it alive while they read.
	pcln *gopclntab.Table

	// names interns the function and file names handed out, so that a
	// hot function's name is one string however often it is looked up.
	mu    sync.Mutex
	names map[uint32]string // offset into funcnames (files: high bit set)
	bytes int64
}

func newGoLazy(p *gopclntab.Table) (*goLazy, error) {
	d := p.Data
	if len(d) < 72 || d[7] != 8 {
		return nil, fmt.Errorf("pclntab header: not a 64-bit Go 1.18+ table")
	}
	l := &goLazy{data: d, textStart: p.TextStart, quantum: uint64(d[6]), names: map[uint32]string{}, pcln: p}
	switch binary.LittleEndian.Uint32(d) {
	case 0xfffffff1:
		l.go120 = true
	case 0xfffffff0:
	default:
		return nil, fmt.Errorf("pclntab magic older than Go 1.18")
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(d[8+8*i:]) }
	nfunc := word(0)
	off := []uint64{word(3), word(4), word(5), word(6), word(7)}
	for _, o := range off {
		if o > uint64(len(d)) {
			return nil, fmt.Errorf("pclntab offset %d past its end %d", o, len(d))
		}
	}
	l.funcnames, l.cutab, l.filetab, l.pctab, l.funcdata = d[off[0]:], d[off[1]:], d[off[2]:], d[off[3]:], d[off[4]:]
	if nfunc > uint64(len(l.funcdata))/8-1 {
		return nil, fmt.Errorf("pclntab: %d functions do not fit", nfunc)
	}
	l.nfunc = int(nfunc)
	return l, nil
}

func (l *goLazy) u32(b []byte, off uint64) (uint32, bool) {
	if off+4 > uint64(len(b)) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[off:]), true
}

// find returns the offset of the _func holding vaddr.
func (l *goLazy) find(vaddr uint64) (funcOff uint64, ok bool) {
	defer runtime.KeepAlive(l)
	if vaddr < l.textStart || l.nfunc == 0 {
		return 0, false
	}
	off := vaddr - l.textStart
	entry := func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(l.funcdata[i*8:])) }
	if off < entry(0) || off >= entry(l.nfunc) {
		return 0, false
	}
	i := sort.Search(l.nfunc, func(i int) bool { return entry(i) > off }) - 1
	fo := uint64(binary.LittleEndian.Uint32(l.funcdata[i*8+4:]))
	if fo+44 > uint64(len(l.funcdata)) {
		return 0, false
	}
	return fo, true
}

// lookup decodes the function at vaddr, its file and line.
func (l *goLazy) lookup(vaddr uint64) (fn, file string, line int, ok bool) {
	defer runtime.KeepAlive(l)
	fo, ok := l.find(vaddr)
	if !ok {
		return "", "", 0, false
	}
	f := l.funcdata[fo:]
	entry := l.textStart + uint64(binary.LittleEndian.Uint32(f))
	nameOff := binary.LittleEndian.Uint32(f[4:])
	fn, ok = l.name(nameOff, l.funcnames, 0)
	if !ok {
		return "", "", 0, false
	}
	pcfile := binary.LittleEndian.Uint32(f[20:])
	pcln := binary.LittleEndian.Uint32(f[24:])
	cuOff := binary.LittleEndian.Uint32(f[32:])
	if fileno, ok := l.pcvalue(pcfile, entry, vaddr); ok && fileno >= 0 {
		if fileOff, ok := l.u32(l.cutab, (uint64(cuOff)+uint64(fileno))*4); ok && fileOff != ^uint32(0) {
			file, _ = l.name(fileOff, l.filetab, 1<<31)
		}
	}
	// As debug/gosym: -1 when the table has no line.
	line = -1
	if ln, ok := l.pcvalue(pcln, entry, vaddr); ok {
		line = int(ln)
	}
	return fn, file, line, true
}

// name returns the NUL-terminated string at off in tab, interned.
func (l *goLazy) name(off uint32, tab []byte, tag uint32) (string, bool) {
	key := off | tag
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.names[key]; ok {
		return s, true
	}
	if uint64(off) >= uint64(len(tab)) {
		return "", false
	}
	b := tab[off:]
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	if n == len(b) {
		return "", false
	}
	s := string(b[:n])
	l.names[key] = s
	l.bytes += int64(n) + 48
	return s, true
}

// namesSize is the memory of the interned names.
func (l *goLazy) namesSize() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// pcvalue decodes the pc-value table at off (runtime.pcvalue) for pc in
// the function starting at entry. Offset 0 is no table, as the runtime
// has it (debug/gosym decodes whatever the table's first bytes say).
func (l *goLazy) pcvalue(off uint32, entry, pc uint64) (int32, bool) {
	if off == 0 || uint64(off) >= uint64(len(l.pctab)) {
		return 0, false
	}
	b := l.pctab[off:]
	val, cur := int32(-1), entry
	for {
		uv, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		if uv == 0 && cur != entry {
			return 0, false
		}
		if uv&1 != 0 {
			val += int32(^(uv >> 1))
		} else {
			val += int32(uv >> 1)
		}
		d, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		cur += d * l.quantum
		if pc < cur {
			return val, true
		}
	}
}
