// Package elfmap maps sections of ELF files read-only instead of reading
// them onto the heap. The tables the agent reads in place (a Go binary's
// pclntab, a third of its size; the .eh_frame of a big C++ library, tens
// of MB) are binary-searched and touched a few pages per lookup: mapped,
// they cost the pages touched, which DropPages releases, rather than
// their whole size for as long as they are cached.
package elfmap

import (
	"debug/elf"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
)

// maxSection bounds what is mapped; larger claims are left to the caller's
// own checks.
const maxSection = 1 << 30

// Section is a mapped section. Data points into the mapping, which the
// garbage collector unmaps once the Section is unreachable: a reader of
// Data keeps its Section reachable until it is done (runtime.KeepAlive),
// since slices of Data do not.
type Section struct {
	Data []byte
	mem  []byte
}

// Map maps s from the file the ELF was opened from, when that is an
// *os.File (elf.Open, elf.NewFile of one) and s is stored as is (not
// compressed, not NOBITS). ok is false otherwise; the caller reads s then.
// The mapping outlives the file's descriptor.
func Map(s *elf.Section) (m *Section, ok bool) {
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.Type == elf.SHT_NOBITS || s.FileSize == 0 || s.FileSize > maxSection {
		return nil, false
	}
	sr, isSR := s.ReaderAt.(*io.SectionReader)
	if !isSR {
		return nil, false
	}
	outer, off, n := sr.Outer()
	f, isFile := outer.(*os.File)
	if !isFile || off < 0 || uint64(n) < s.FileSize {
		return nil, false
	}
	st, err := f.Stat()
	if err != nil || uint64(off)+s.FileSize > uint64(st.Size()) {
		return nil, false // a mapping past the end faults (SIGBUS)
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	mem, err := syscall.Mmap(int(f.Fd()), start, int(off-start+int64(s.FileSize)), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false
	}
	// Lookups binary-search and read one entry: read-ahead would only
	// fill memory.
	_ = syscall.Madvise(mem, syscall.MADV_RANDOM)
	m = &Section{Data: mem[off-start:], mem: mem}
	mapped.Add(int64(len(mem)))
	runtime.AddCleanup(m, func(mem []byte) {
		_ = syscall.Munmap(mem)
		mapped.Add(-int64(len(mem)))
	}, mem)
	return m, true
}

// DropPages releases the resident pages of the mapping: later reads fault
// in again, from the page cache, only the pages they touch. It is safe
// while other goroutines read Data.
func (m *Section) DropPages() {
	if m != nil {
		_ = syscall.Madvise(m.mem, syscall.MADV_DONTNEED)
	}
}

// mapped is the address space of the mappings not yet unmapped.
var mapped atomic.Int64

// MappedBytes reports the address space the mapped sections take now
// (page-rounded), whatever holds them: what is resident of it is only
// the pages touched since their last DropPages.
func MappedBytes() int64 { return mapped.Load() }

// faults counts the reads of a mapping that faulted (Recover).
var faults atomic.Uint64

// Faults reports how many reads of a mapped section faulted: the file was
// truncated or rewritten in place under the mapping (a shared library
// copied over while in use). Each such read answered "not found".
func Faults() uint64 { return faults.Load() }

// Guard makes a fault of the calling goroutine a panic that Recover
// catches, rather than a crash: a file truncated under its mapping
// raises SIGBUS on the pages past its new end. Use it as
//
//	defer elfmap.Recover(elfmap.Guard(), &ok)
//
// in a function with a named boolean result ok, which a fault sets to
// false.
func Guard() (old bool) { return debug.SetPanicOnFault(true) }

// Recover restores the fault setting Guard changed and turns a memory
// fault into *ok = false, counted; any other panic goes on.
func Recover(old bool, ok *bool) {
	debug.SetPanicOnFault(old)
	if r := recover(); r != nil {
		if _, isFault := r.(interface{ Addr() uintptr }); !isFault {
			panic(r)
		}
		faults.Add(1)
		if ok != nil {
			*ok = false
		}
	}
}
