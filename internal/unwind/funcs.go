package unwind

import (
	"debug/elf"
	"encoding/binary"
	"runtime"
	"slices"
	"sort"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// FuncRange is the address range [Start, End) of one FDE: the code one
// function's unwind rules cover. Compilers write one FDE per function
// (and one per split-off part, such as GCC's .cold blocks), so where no
// symbol names a function its FDE still says where it starts.
type FuncRange struct{ Start, End uint64 }

// FunctionAt returns the range of the .eh_frame (else .debug_frame) FDE
// that covers ELF virtual address vaddr. Go pclntab functions are not
// answered: their names never need it.
func (t *Table) FunctionAt(vaddr uint64) (FuncRange, bool) {
	for _, src := range t.sources {
		fs, ok := src.(*frameSection)
		if !ok {
			continue
		}
		if r, ok := fs.bounds(vaddr); ok {
			return r, true
		}
	}
	return FuncRange{}, false
}

// bounds returns the range of the FDE covering pc.
func (fs *frameSection) bounds(pc uint64) (_ FuncRange, ok bool) {
	defer runtime.KeepAlive(fs)
	defer elfmap.Recover(elfmap.Guard(), &ok)
	off, found := fs.find(pc)
	if !found || off < 0 || off >= len(fs.data) {
		return FuncRange{}, false
	}
	e, err := fs.entry(off)
	if err != nil || e.isCIE || e.length == 0 {
		return FuncRange{}, false
	}
	start, end, _, err := fs.fde(e)
	if err != nil || pc < start || pc >= end {
		return FuncRange{}, false
	}
	return FuncRange{start, end}, true
}

// FunctionRanges lists the FDE ranges of f's .eh_frame and .debug_frame
// (a file built without unwind tables has its own code in .debug_frame
// and only the start-up files' in .eh_frame), sorted by start, without
// empty ones and with a range both sections hold listed once. It is nil
// when f has neither or is of an unknown machine.
func FunctionRanges(f *elf.File) ([]FuncRange, error) {
	a, known := archOf(f.Machine)
	if !known {
		return nil, nil
	}
	var out []FuncRange
	for _, debug := range []bool{false, true} {
		fs, err := loadFrameSection(f, a, debug)
		if err != nil {
			return nil, err
		}
		if fs != nil {
			out = append(out, fs.ranges()...)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].End < out[j].End
	})
	return slices.Compact(out), nil
}

// ranges lists every FDE's range, from the .eh_frame_hdr table when
// the section has one, else from the scan's index.
func (fs *frameSection) ranges() (out []FuncRange) {
	defer runtime.KeepAlive(fs)
	defer elfmap.Recover(elfmap.Guard(), nil)
	if fs.hdr != nil {
		for i := 0; i+8 <= len(fs.hdr); i += 8 {
			fdeAddr := fs.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(fs.hdr[i+4:]))))
			off := int(fdeAddr - fs.addr)
			if fdeAddr < fs.addr || off >= len(fs.data) {
				continue
			}
			e, err := fs.entry(off)
			if err != nil || e.isCIE || e.length == 0 {
				continue
			}
			if start, end, _, err := fs.fde(e); err == nil && end > start {
				out = append(out, FuncRange{start, end})
			}
		}
	} else {
		for _, r := range fs.fdes {
			out = append(out, FuncRange{r.start, r.end})
		}
	}
	return out
}
