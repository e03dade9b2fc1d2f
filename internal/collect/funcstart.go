package collect

import (
	"debug/elf"
	"path/filepath"
	"strconv"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// FunctionFinder says where the function holding an address starts when
// no symbol names it. A LeafFixer that is one (CFILeafFixer) answers from
// the unwind tables it already holds for the walk.
type FunctionFinder interface {
	// FunctionStart returns the file offset, in m's file, of the start
	// of the function (the unwind table's FDE) holding addr.
	FunctionStart(p *proc.Process, m *proc.Mapping, addr uint64) (uint64, bool)
}

// FunctionStart implements FunctionFinder from the FDEs of .eh_frame and
// .debug_frame.
func (f *CFILeafFixer) FunctionStart(p *proc.Process, m *proc.Mapping, addr uint64) (uint64, bool) {
	if m.Anonymous() {
		return 0, false
	}
	e := f.entry(p.OpenPath(m), leafKey{m.Dev, m.Inode})
	if e.key == "" {
		return 0, false
	}
	vaddr, ok := symbolize.VirtualAddress(e.progs, symMapping(m), addr)
	if !ok {
		return 0, false
	}
	t, err := f.Tables.Table(e.key, p.OpenPath(m))
	if err != nil {
		return 0, false
	}
	r, ok := t.FunctionAt(vaddr)
	if !ok {
		return 0, false
	}
	return fileOffset(e.progs, r.Start)
}

// fileOffset translates an ELF virtual address to its offset in the
// file, through the PT_LOAD segment holding it.
func fileOffset(progs []*elf.Prog, vaddr uint64) (uint64, bool) {
	for _, p := range progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// nameByStart names the unsymbolized frame f of mapping m by the start
// of its function, module+0xOFF with OFF the file offset as unsymbolized
// frames show theirs (profile.Frame.DisplayName), so that its samples
// aggregate as one function. f keeps its exact address; without a
// function to name, f is left as it was.
func (b *builder) nameByStart(p *proc.Process, m *proc.Mapping, f *profile.Frame) {
	ff, ok := b.opts.Leaf.(FunctionFinder)
	if !ok || f.Function != "" || f.Mapping == nil {
		return
	}
	off, ok := ff.FunctionStart(p, m, f.Address)
	if !ok {
		return
	}
	f.Function = filepath.Base(f.Mapping.Path) + "+0x" + strconv.FormatUint(off, 16)
	f.NoSymbol = true
}
