package unwind

import (
	"debug/elf"
	"encoding/binary"
)

// An aarch64 linker writes no unwind information for its PLT (GNU ld and
// lld alike), and every call into a shared library passes through a stub
// there: a sample in one has no rule, and the frame-record chain the walk
// falls back to skips the caller, whose return address is still in x30.
// A stub's instructions are fixed by the ABI and touch neither sp, x29 nor
// x30 (adrp x16; ldr x17, [x16, #n]; add x16, x16, #n; br x17, with a BTI
// landing pad and an authenticating branch where the output asks for
// them), so its rule is known: CFA = sp, the return address in x30, the
// caller's frame pointer in x29. pltStubs holds that rule for the runs of
// such instructions that start where a stub does: past the lazy-binding
// header (PLT0, which pushes x16 and x30) and after a branch. Anything else
// in the section (the TLS descriptors' lazy trampoline, which pushes x2
// and x3) has no rule.

// pltHeader is the size of the aarch64 PLT's first entry (PLT0), which
// GNU ld and lld both write in 32 bytes.
const pltHeader = 32

// pltStubs is a source of the aarch64 PLT stubs' rule.
type pltStubs struct {
	ranges []span
}

// newPLTStubs finds f's PLT sections whose stubs are all of the ABI's
// forms; nil when there is none (or f is not aarch64).
func newPLTStubs(f *elf.File) *pltStubs {
	if f.Machine != elf.EM_AARCH64 {
		return nil
	}
	var p pltStubs
	for _, s := range f.Sections {
		var skip uint64
		switch s.Name {
		case ".plt":
			skip = pltHeader // lazy binding's header
		case ".iplt":
			// A static executable's IFUNC stubs: no header.
		default:
			continue
		}
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size <= skip || s.Size > 1<<24 {
			continue
		}
		b, err := s.Data()
		if err != nil || uint64(len(b)) != s.Size {
			continue
		}
		p.ranges = append(p.ranges, stubRuns(b[skip:], s.Addr+skip)...)
	}
	if len(p.ranges) == 0 {
		return nil
	}
	return &p
}

// stubRuns returns the address ranges in code (at addr) of consecutive
// stub instructions that begin at its start or right after a branch: a
// stub's first instruction is where a call lands, and every instruction
// to its branch is one of pltInsn's.
func stubRuns(code []byte, addr uint64) []span {
	var runs []span
	open, start := true, uint64(0)
	inRun := false
	for i := 0; i+4 <= len(code); i += 4 {
		insn := binary.LittleEndian.Uint32(code[i:])
		pc := addr + uint64(i)
		switch {
		case pltInsn(insn) && (inRun || open):
			if !inRun {
				inRun, start = true, pc
			}
		default:
			if inRun {
				runs = append(runs, span{start, pc})
				inRun = false
			}
		}
		open = insn&0xFFFFFC1F == 0xD61F0000 // br Xn: the next stub starts here
	}
	if inRun {
		runs = append(runs, span{start, addr + uint64(len(code))})
	}
	return runs
}

// pltInsn reports whether insn is one of a PLT stub's instructions, none
// of which writes sp, x29 or x30.
func pltInsn(insn uint32) bool {
	switch {
	case insn&0x9F00001F == 0x90000010: // adrp x16, page
	case insn&0xFFC003FF == 0xF9400211: // ldr x17, [x16, #off]
	case insn&0xFF8003FF == 0x91000210: // add x16, x16, #off
	case insn == 0xD61F0220: // br x17
	case insn == 0xD503245F: // bti c
	case insn == 0xD503201F: // nop
	case insn == 0xD503219F, insn == 0xD50321DF: // autia1716, autib1716
	default:
		return false
	}
	return true
}

func (p *pltStubs) rows(pc uint64) (uint64, []row, bool, error) {
	for _, r := range p.ranges {
		if pc >= r.start && pc < r.end {
			// The section as one function; Unknown past its end.
			return r.start, []row{{pc: r.start, rule: Rule{Kind: SPOffset, FP: FPSame, RA: RAInLR}}, {pc: r.end}}, true, nil
		}
	}
	return 0, nil, false, nil
}
