package unwind

import (
	"debug/elf"
	"sort"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
)

// arm64's vDSO (Debian's 6.1 among others) has neither .eh_frame nor
// .debug_frame, and its functions are leaves that keep no frame record:
// a sample in clock_gettime's fast path has no rule, and the kernel's
// chain of frame records skips its caller, whose return address is still
// in x30 (libc's clock_gettime, which called it). leafFuncs gives such a
// function the rule a leaf has everywhere, CFA = sp and the return address
// in x30, when every one of its instructions is decoded and none moves sp,
// writes x29 or x30 (other than to sign or authenticate x30, a hint),
// calls (bl, blr) or is one the decoder does not know. Functions that do
// not pass have no rule, as before; so has the signal-return trampoline,
// which a signal handler returns into and whose x30 is no return address.
// It is read only for aarch64 files without frame sections and with at
// most maxLeafText bytes of functions (the vDSO has about 1 KiB).

// maxLeafText bounds the function bytes leafFuncs decodes in one file.
const maxLeafText = 64 << 10

// nrRtSigreturn is arm64's rt_sigreturn system call number.
const nrRtSigreturn = 139

type leafFuncs struct {
	funcs []span // sorted, each a verified leaf
}

// newLeafFuncs returns the verified leaves of f, nil when there is none
// or f is not an aarch64 file of at most maxLeafText bytes of functions.
func newLeafFuncs(f *elf.File) *leafFuncs {
	if f.Machine != elf.EM_AARCH64 {
		return nil
	}
	syms, _ := f.DynamicSymbols()
	if s, err := f.Symbols(); err == nil {
		syms = append(syms, s...)
	}
	type fn struct {
		name       string
		start, end uint64
	}
	var fns []fn
	var total uint64
	seen := map[uint64]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF || seen[s.Value] {
			continue
		}
		seen[s.Value] = true
		total += s.Size
		if total > maxLeafText {
			return nil
		}
		fns = append(fns, fn{s.Name, s.Value, s.Value + s.Size})
	}
	var l leafFuncs
	for _, x := range fns {
		if strings.Contains(x.name, "sigreturn") {
			continue
		}
		code, ok := textAt(f, x.start, x.end)
		if ok && leafCode(code) {
			l.funcs = append(l.funcs, span{x.start, x.end})
		}
	}
	if len(l.funcs) == 0 {
		return nil
	}
	sort.Slice(l.funcs, func(i, j int) bool { return l.funcs[i].start < l.funcs[j].start })
	return &l
}

// textAt returns the bytes of f's executable section holding [start, end).
func textAt(f *elf.File, start, end uint64) ([]byte, bool) {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || start < s.Addr || end > s.Addr+s.Size {
			continue
		}
		b, err := s.Data()
		if err != nil || uint64(len(b)) != s.Size {
			return nil, false
		}
		return b[start-s.Addr : end-s.Addr], true
	}
	return nil, false
}

// leafCode reports whether every instruction of code keeps sp, x29 and
// x30 as the call left them (leafFuncs).
func leafCode(code []byte) bool {
	if len(code)%4 != 0 {
		return false
	}
	for i := 0; i < len(code); i += 4 {
		inst, err := arm64asm.Decode(code[i : i+4])
		if err != nil || !leafInsn(inst) {
			return false
		}
	}
	return true
}

func leafInsn(inst arm64asm.Inst) bool {
	op := inst.Op.String()
	switch {
	case inst.Op == arm64asm.HINT, inst.Op == arm64asm.NOP:
		return true // pointer authentication of x30, BTI, NOP
	case strings.HasPrefix(op, "BL"):
		return false // a call: x30 written
	case inst.Op == arm64asm.RET:
		return inst.Args[0] == arm64asm.X30
	}
	if inst.Op == arm64asm.MOV {
		if imm, ok := inst.Args[1].(arm64asm.Imm64); ok && inst.Args[0] == arm64asm.X8 && imm.Imm == nrRtSigreturn {
			return false // the signal-return trampoline's system call
		}
	}
	for i, a := range inst.Args {
		if a == nil {
			break
		}
		if m, ok := a.(arm64asm.MemImmediate); ok && m.Mode != arm64asm.AddrOffset && frameReg(arm64asm.Reg(m.Base), true) {
			return false // writeback to sp, x29 or x30
		}
		// The destination: the first operand; a load's second too (a pair).
		if i == 0 || i == 1 && strings.HasPrefix(op, "LD") {
			switch r := a.(type) {
			case arm64asm.Reg:
				if frameReg(r, false) {
					return false
				}
			case arm64asm.RegSP:
				if frameReg(arm64asm.Reg(r), true) {
					return false
				}
			}
		}
	}
	return true
}

// frameReg reports whether r is x29 or x30 (either width), or, for an
// operand where register 31 is the stack pointer, sp.
func frameReg(r arm64asm.Reg, spOperand bool) bool {
	switch r {
	case arm64asm.X29, arm64asm.W29, arm64asm.X30, arm64asm.W30:
		return true
	case arm64asm.XZR, arm64asm.WZR:
		return spOperand
	}
	return false
}

func (l *leafFuncs) rows(pc uint64) (uint64, []row, bool, error) {
	i := sort.Search(len(l.funcs), func(i int) bool { return l.funcs[i].end > pc })
	if i == len(l.funcs) || pc < l.funcs[i].start {
		return 0, nil, false, nil
	}
	fn := l.funcs[i]
	return fn.start, []row{{pc: fn.start, rule: Rule{Kind: SPOffset, FP: FPSame, RA: RAInLR}}, {pc: fn.end}}, true, nil
}
