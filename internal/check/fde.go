package check

import (
	"debug/elf"
	"fmt"
	"sort"

	"github.com/spanprof/spanprof/internal/unwind"
)

// minFDECoverage is the share of .text the FDEs must cover for their
// functions to stand for the file's code: below it (a file built without
// unwind tables keeps only the start-up files' FDEs) the frame pointers of
// the rest cannot be verified.
const minFDECoverage = 0.5

// startupAllowance bounds the code right after the outermost function
// (_start) that coverage leaves out: the link order puts crtbegin's
// functions (deregister_tm_clones … frame_dummy, 0xb9 bytes in GCC 12's
// x86-64 crtbeginS.o, a little more on AArch64), built without unwind
// tables, there.
const startupAllowance = 320

// fdeSource names, in the summary, functions delimited by the unwind
// tables rather than by symbols.
const fdeSource = ".eh_frame function ranges (no symbols)"

// analyzeFDEFunctions checks the prologues of the functions the unwind
// tables delimit: a stripped file without a debug file still has one FDE
// per function in .eh_frame, the same ranges spanprof names its frames
// by. A function is named by a .dynsym symbol starting where it starts,
// else by module+0xOFFSET (the file offset, as recordings name it).
// Coverage is the share of .text the FDEs delimit, start-up code
// without unwind tables aside (startupAllowance).
// Split-off parts (GCC's .cold blocks), whose unwind rule at their start
// is not a function entry's, run in their parent's frame and are left
// out; the outermost frame (_start: undefined return address) is
// start-up code.
func analyzeFDEFunctions(f *elf.File, base string, ranges []unwind.FuncRange, dynsyms []elf.Symbol) (fpStats, float64) {
	st := fpStats{Source: fdeSource}
	text := f.Section(".text")
	if text == nil || text.Size == 0 {
		return st, 0
	}
	code := &codeSections{secs: []*elf.Section{text}, data: map[*elf.Section][]byte{}}
	names := map[uint64]string{}
	for _, s := range dynsyms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			names[s.Value] = s.Name
		}
	}
	table, err := unwind.NewTable(f)
	if err != nil {
		return st, 0
	}
	scan := scanX86
	if f.Machine == elf.EM_AARCH64 {
		scan = scanAArch64
	}
	tab := &unwindTable{t: table}
	var covered, startup uint64
	for i, r := range ranges {
		if r.Start < text.Addr || r.End > text.Addr+text.Size {
			continue // the PLT and .init/.fini: the linker's, not the sources'
		}
		covered += r.End - r.Start
		name := names[r.Start]
		if name == "" {
			name = fdeName(f, base, r.Start)
		}
		rule, err := table.RuleAt(r.Start)
		switch {
		case err == nil && rule.Outermost:
			st.Toolchain = append(st.Toolchain, name)
			next := text.Addr + text.Size
			if i+1 < len(ranges) && ranges[i+1].Start < next {
				next = ranges[i+1].Start
			}
			if next > r.End {
				startup = min(next-r.End, startupAllowance)
			}
			continue
		case err != nil || !isEntryRule(f.Machine, rule):
			continue
		case isToolchain(name):
			st.Toolchain = append(st.Toolchain, name)
			continue
		}
		body := code.bytes(r.Start, r.End-r.Start)
		if len(body) == 0 {
			continue
		}
		frame, call := scan(body)
		st.Checked++
		switch {
		case frame:
			st.WithFrame++
		case call:
			st.Missing = append(st.Missing, name)
		default:
			st.Leaf = append(st.Leaf, name)
			if !hasCFI(f, &tab, r.Start, r.End-r.Start) {
				st.LeafNoCFI = append(st.LeafNoCFI, name)
			}
		}
	}
	sort.Strings(st.Missing)
	sort.Strings(st.Leaf)
	sort.Strings(st.LeafNoCFI)
	sort.Strings(st.Toolchain)
	return st, float64(covered) / float64(text.Size-startup)
}

// isEntryRule reports whether r is the rule at a function's first
// instruction: the CFA is the stack pointer before the call (x86-64: the
// return address just pushed; AArch64: nothing pushed).
func isEntryRule(m elf.Machine, r unwind.Rule) bool {
	if m == elf.EM_AARCH64 {
		return r.Kind == unwind.SPOffset && r.Offset == 0
	}
	return r.Kind == unwind.SPOffset && r.Offset == 8
}

// fdeName is module+0xOFFSET for the function at virtual address vaddr.
func fdeName(f *elf.File, base string, vaddr uint64) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return fmt.Sprintf("%s+0x%x", base, vaddr-p.Vaddr+p.Off)
		}
	}
	return fmt.Sprintf("%s+0x%x", base, vaddr)
}
