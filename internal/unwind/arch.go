package unwind

import "debug/elf"

// Arch holds the DWARF register numbers of one architecture that the CFA
// rules and the hybrid walk use. They live here alone, so that a port
// adds its own value and nothing else in the package names a register.
type Arch struct {
	// SP and FP are the stack and frame pointer registers, RA the column
	// of the return address in the CFI rows.
	SP, FP, RA uint64
	// LR: a call leaves the return address in a register (RA's), which
	// a function stores only when it calls further, so the rules say
	// where it is (Rule.RA). Without one it is always the word under
	// the CFA.
	LR bool
}

// AMD64 is x86-64: rsp 7, rbp 6, return address column 16.
var AMD64 = Arch{SP: 7, FP: 6, RA: 16}

// ARM64 is AArch64: sp 31, the frame pointer x29, and the return
// address in the link register's column, x30: until a function stores
// it (its frame record), the caller is in x30 itself.
var ARM64 = Arch{SP: 31, FP: 29, RA: 30, LR: true}

// archOf returns the register numbers of an ELF machine.
func archOf(m elf.Machine) (Arch, bool) {
	switch m {
	case elf.EM_X86_64:
		return AMD64, true
	case elf.EM_AARCH64:
		return ARM64, true
	}
	return Arch{}, false
}
