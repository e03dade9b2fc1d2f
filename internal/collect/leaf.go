package collect

import (
	"sync"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

// CFILeafFixer recovers lost callers from the binaries' CFA rules
// (.eh_frame, .debug_frame, Go pcsp): when the rule at the sampled ip is
// RSP-based, rbp does not hold the function's frame and the return address
// sits at CFA-8 in the stack bytes the kernel copied.
type CFILeafFixer struct {
	Symbolizer *symbolize.Symbolizer
	Tables     *unwind.Cache

	// byMapping remembers the object and table of each mapping, so a
	// sample costs a map lookup instead of a stat and two cache walks.
	mu        sync.Mutex
	byMapping map[leafKey]leafEntry
}

type leafKey struct {
	dev          string
	inode, start uint64
}

type leafEntry struct {
	obj   *symbolize.Object
	table *unwind.Table
}

// maxLeafEntries bounds byMapping; it is dropped and refilled past that.
const maxLeafEntries = 16384

// RecoverCaller implements LeafFixer.
func (f *CFILeafFixer) RecoverCaller(openPath string, m *proc.Mapping, ip, sp uint64, stackTop []byte) (uint64, bool) {
	e, ok := f.entry(openPath, m)
	if !ok {
		return 0, false
	}
	pm := profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset}
	vaddr, ok := e.obj.VirtualAddress(&pm, ip)
	if !ok {
		return 0, false
	}
	rule, err := e.table.RuleAt(vaddr)
	if err != nil {
		return 0, false
	}
	return unwind.RecoverCaller(rule, sp, stackTop)
}

func (f *CFILeafFixer) entry(openPath string, m *proc.Mapping) (leafEntry, bool) {
	k := leafKey{m.Dev, m.Inode, m.Start}
	f.mu.Lock()
	e, ok := f.byMapping[k]
	f.mu.Unlock()
	if ok {
		return e, e.table != nil
	}
	// A failure is remembered too (nil table): one attempt per mapping.
	if obj, err := f.Symbolizer.Open(openPath, m.Path); err == nil {
		e.obj = obj
		if t, err := f.Tables.Table(obj.Identity().Key(), openPath); err == nil {
			e.table = t
		}
	}
	f.mu.Lock()
	if f.byMapping == nil || len(f.byMapping) >= maxLeafEntries {
		f.byMapping = map[leafKey]leafEntry{}
	}
	f.byMapping[k] = e
	f.mu.Unlock()
	return e, e.table != nil
}
