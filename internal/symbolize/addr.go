package symbolize

import (
	"debug/elf"
)

// Mapping is what symbolization needs of a process's mapping of a file:
// where the mapping starts and ends in the process and the file offset it
// was loaded from. Callers convert their own mapping types (proc.Mapping,
// profile.Mapping) to it, so this package depends on neither.
type Mapping struct {
	// Start and Limit bound the mapping; Limit 0 leaves it unbounded.
	Start, Limit uint64
	Offset       uint64
}

// FileOffset returns the file offset that runtime address addr of mapping
// m was loaded from.
func FileOffset(m Mapping, addr uint64) uint64 {
	return addr - m.Start + m.Offset
}

// VirtualAddress translates a runtime address inside mapping m to the ELF
// virtual address that symbol tables, .eh_frame and .gopclntab use. The
// mapping's file offset locates the PT_LOAD segment the page came from,
// which gives the address independently of where the loader put the
// object (PIE, shared libraries, prelinked or not). ok is false when the
// address is outside the mapping or in no loadable file-backed segment.
func VirtualAddress(progs []*elf.Prog, m Mapping, addr uint64) (vaddr uint64, ok bool) {
	if addr < m.Start || (m.Limit != 0 && addr >= m.Limit) {
		return 0, false
	}
	return OffsetToVirtual(progs, FileOffset(m, addr))
}

// OffsetToVirtual maps a file offset to the virtual address of the
// PT_LOAD segment that contains it.
func OffsetToVirtual(progs []*elf.Prog, off uint64) (uint64, bool) {
	for _, p := range progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}
