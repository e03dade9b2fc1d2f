package symbolize

import (
	"debug/gosym"
	"fmt"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// goTable resolves Go functions, files and lines.
type goTable struct {
	tab *gosym.Table
	// pcln is the pclntab that tab reads (kept whole: gosym reads it
	// lazily), shared with the unwind tables through a gopclntab.Store.
	pcln *gopclntab.Table
}

// size estimates the memory of the table without its pclntab, which the
// gopclntab.Store accounts for.
func (t *goTable) size() int64 { return int64(len(t.tab.Funcs)) * 200 }

func newGoTable(p *gopclntab.Table) (*goTable, error) {
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
// expanded: debug/gosym does not expose the inline tree, so an inlined
// callee is reported as its outermost caller.
func (g *goTable) lookup(vaddr uint64) (fn, file string, line int, ok bool) {
	file, line, f := g.tab.PCToLine(vaddr)
	if f == nil {
		return "", "", 0, false
	}
	return f.Name, file, line, true
}
