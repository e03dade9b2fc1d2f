package collect

import (
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
}

// RecoverCaller implements LeafFixer.
func (f *CFILeafFixer) RecoverCaller(openPath string, m *proc.Mapping, ip, sp uint64, stackTop []byte) (uint64, bool) {
	obj, err := f.Symbolizer.Open(openPath, m.Path)
	if err != nil {
		return 0, false
	}
	pm := profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset}
	vaddr, ok := obj.VirtualAddress(&pm, ip)
	if !ok {
		return 0, false
	}
	t, err := f.Tables.Table(obj.Identity().Key(), openPath)
	if err != nil {
		return 0, false
	}
	rule, err := t.RuleAt(vaddr)
	if err != nil {
		return 0, false
	}
	return unwind.RecoverCaller(rule, sp, stackTop)
}
