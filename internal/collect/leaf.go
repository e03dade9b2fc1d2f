package collect

import (
	"debug/elf"
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
//
// It runs for every sample, so it reads only what it needs of a binary:
// the program headers (to translate addresses), the build ID (to share
// tables between processes) and the unwind table. Symbol tables and DWARF
// wait for the profile to be built.
type CFILeafFixer struct {
	Tables *unwind.Cache

	// byMapping remembers the table of each mapping, so a sample costs a
	// map lookup instead of a file open.
	mu        sync.Mutex
	byMapping map[leafKey]leafEntry
}

type leafKey struct {
	dev          string
	inode, start uint64
}

type leafEntry struct {
	progs []*elf.Prog
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
	vaddr, ok := symbolize.VirtualAddress(e.progs, &pm, ip)
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
	e = f.load(openPath)
	f.mu.Lock()
	if f.byMapping == nil || len(f.byMapping) >= maxLeafEntries {
		f.byMapping = map[leafKey]leafEntry{}
	}
	f.byMapping[k] = e
	f.mu.Unlock()
	return e, e.table != nil
}

func (f *CFILeafFixer) load(openPath string) leafEntry {
	ef, err := elf.Open(openPath)
	if err != nil {
		return leafEntry{}
	}
	progs := ef.Progs
	key := ""
	if id := symbolize.BuildID(ef); id != "" {
		key = "gnu:" + id
	}
	ef.Close()
	if key == "" {
		id, err := symbolize.Identify(openPath)
		if err != nil {
			return leafEntry{}
		}
		key = id.Key()
	}
	t, err := f.Tables.Table(key, openPath)
	if err != nil {
		return leafEntry{}
	}
	return leafEntry{progs: progs, table: t}
}
