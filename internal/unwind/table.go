package unwind

import (
	"debug/elf"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// maxCachedFuncs bounds the per-binary cache of evaluated functions; when
// full it is dropped and refilled, which only costs re-running CFI.
const maxCachedFuncs = 4096

// Table answers CFA rules for one binary. It is safe for concurrent use.
type Table struct {
	// sources are asked in order: Go pclntab, .eh_frame, .debug_frame.
	sources []source
	// size is the bytes of section data the sources hold, pcln's
	// included.
	size int64
	// pcln is the Go pclntab of a Go binary's table, which a Cache
	// shares with the symbolizer.
	pcln *gopclntab.Table
	// frames are the .eh_frame and .debug_frame sources, whose mapped
	// pages dropPages releases.
	frames []*frameSection

	mu    sync.Mutex
	funcs map[uint64][]row // function start → rows
	spans []span           // sorted function ranges in funcs, for lookup
}

type span struct{ start, end uint64 }

// source yields the rows of the function containing pc; ok is false when
// it has no information for pc.
type source interface {
	rows(pc uint64) (start uint64, rows []row, ok bool, err error)
}

// NewTable indexes the unwind information of f. It keeps the frame
// sections in memory and closes nothing: f may be closed afterwards.
func NewTable(f *elf.File) (*Table, error) {
	return newTable(f, func() (*gopclntab.Table, error) { return gopclntab.Find(f) })
}

// newTable is NewTable with f's Go pclntab from pclntab: read from f, or
// the copy a gopclntab.Store shares.
func newTable(f *elf.File, pclntab func() (*gopclntab.Table, error)) (*Table, error) {
	t := &Table{funcs: map[uint64][]row{}}
	isGo := false
	if p, err := pclntab(); err == nil {
		isGo = true
		t.size += p.Size()
		t.pcln = p
		// The SP-delta rules follow amd64's prologue (goFrames.rows):
		// elsewhere Go's frames are the kernel's chain of frame records,
		// as without rules.
		if f.Machine == elf.EM_X86_64 {
			g, err := newGoFrames(p)
			if err != nil {
				return nil, err
			}
			t.sources = append(t.sources, g)
		}
	} else if !errors.Is(err, gopclntab.ErrNotFound) {
		return nil, err
	}
	a, known := archOf(f.Machine)
	if !known {
		// Register numbers of another machine would read as wrong
		// rules: no rules at all is the honest answer.
		return t, nil
	}
	eh, err := loadFrameSection(f, a, false)
	if err != nil {
		return nil, err
	}
	if eh != nil {
		t.sources = append(t.sources, eh)
		t.frames = append(t.frames, eh)
		t.size += eh.heapBytes()
	}
	// Go's .debug_frame hides its frame pointers; only C uses it.
	if !isGo {
		dbg, err := loadFrameSection(f, a, true)
		if err != nil {
			return nil, err
		}
		if dbg != nil {
			t.sources = append(t.sources, dbg)
			t.frames = append(t.frames, dbg)
			t.size += dbg.heapBytes()
		}
	}
	// Last: a PLT no frame section covers (aarch64's linkers write none),
	// and in a small aarch64 file with no frame section at all (the
	// vDSO), the functions verified to be leaves.
	if p := newPLTStubs(f); p != nil {
		t.sources = append(t.sources, p)
	}
	if len(t.frames) == 0 && !isGo {
		if l := newLeafFuncs(f); l != nil {
			t.sources = append(t.sources, l)
		}
	}
	return t, nil
}

// dropPages releases the resident pages of the table's mapped sections
// (the pclntab's are the shared store's to drop).
func (t *Table) dropPages() {
	for _, fs := range t.frames {
		fs.dropPages()
	}
}

// Size returns the bytes of section data the table holds (a Go binary's
// whole pclntab, the frame sections), which bound its memory.
func (t *Table) Size() int64 {
	if t == nil {
		return 0
	}
	return t.size
}

// OpenTable reads the unwind information of the ELF file at path.
func OpenTable(path string) (*Table, error) {
	return openTableWith(path, gopclntab.Find)
}

// openTableWith is OpenTable with the Go pclntab of the file from pclntab:
// read from it, or the copy a gopclntab.Store shares.
func openTableWith(path string, pclntab func(*elf.File) (*gopclntab.Table, error)) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open elf %s: %w", path, err)
	}
	defer f.Close()
	return newTable(f, func() (*gopclntab.Table, error) { return pclntab(f) })
}

// RuleAt returns the CFA rule at ELF virtual address vaddr (translate
// runtime addresses with symbolize.VirtualAddress first). Go functions
// use the pclntab, others .eh_frame, then .debug_frame.
func (t *Table) RuleAt(vaddr uint64) (Rule, error) {
	t.mu.Lock()
	i := sort.Search(len(t.spans), func(i int) bool { return t.spans[i].start > vaddr }) - 1
	if i >= 0 && vaddr < t.spans[i].end {
		rows := t.funcs[t.spans[i].start]
		t.mu.Unlock()
		return ruleIn(rows, vaddr), nil
	}
	t.mu.Unlock()

	var errs []error
	for _, src := range t.sources {
		start, rows, ok, err := src.rows(vaddr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			t.remember(start, rows)
			return ruleIn(rows, vaddr), nil
		}
	}
	return Rule{}, errors.Join(errs...)
}

func ruleIn(rows []row, pc uint64) Rule {
	i := sort.Search(len(rows), func(i int) bool { return rows[i].pc > pc }) - 1
	if i < 0 {
		return Rule{}
	}
	return rows[i].rule.at(pc)
}

func (t *Table) remember(start uint64, rows []row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.funcs[start]; ok {
		return
	}
	if len(t.funcs) >= maxCachedFuncs {
		t.funcs = map[uint64][]row{}
		t.spans = t.spans[:0]
	}
	t.funcs[start] = rows
	sp := span{start: start, end: rows[len(rows)-1].pc}
	i := sort.Search(len(t.spans), func(i int) bool { return t.spans[i].start > start })
	t.spans = append(t.spans, span{})
	copy(t.spans[i+1:], t.spans[i:])
	t.spans[i] = sp
}
