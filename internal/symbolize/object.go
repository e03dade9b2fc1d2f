package symbolize

import (
	"debug/elf"
	"strings"
	"sync"
	"unsafe"

	"github.com/ianlancetaylor/demangle"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// Object is one parsed ELF file, shared by every process that maps it.
// It is immutable after parsing except for a demangling memo, and safe for
// concurrent use.
type Object struct {
	id    Identity
	path  string // display path of the first opener
	progs []*elf.Prog
	syms  *symtab
	gotab *goTable
	dwarf *lazyDWARF // nil without DWARF
	// debugSource says where symbols beyond the file's own came from:
	// "" (none needed or found), "local" or "debuginfod".
	debugSource string
	// awaitingDebug is set when a debug file was requested from
	// debuginfod; Open parses the object again once it arrived.
	awaitingDebug bool

	mu        sync.Mutex
	demangled map[string]string
}

// Symbol is what a lookup finds at one virtual address.
type Symbol struct {
	Function string
	// File and Line come from the Go pclntab or from DWARF line tables
	// (in the file or its separate debug file); empty without either.
	File string
	Line int
	// Inlined marks a function inlined into the next Symbol of a chain.
	Inlined bool
}

// Identity returns the build ID or content hash of the object, which
// exporters name the mapping by (process.executable.build_id.*).
func (o *Object) Identity() Identity { return o.id }

// IsGo reports whether the object has a Go pclntab.
func (o *Object) IsGo() bool { return o.gotab != nil }

// NumSymbols reports how many function symbols the ELF tables held.
func (o *Object) NumSymbols() int { return o.syms.len() }

// VirtualAddress translates a runtime address of mapping m to an ELF
// virtual address of this object.
func (o *Object) VirtualAddress(m Mapping, addr uint64) (uint64, bool) {
	return VirtualAddress(o.progs, m, addr)
}

// HasDWARF reports whether file and line numbers come from DWARF.
func (o *Object) HasDWARF() bool { return o.dwarf != nil }

// DebugSource tells where a stripped object's symbols came from: "local"
// (a debug directory or debuglink), "debuginfod", or "" (its own tables).
func (o *Object) DebugSource() string { return o.debugSource }

// Lookup symbolizes an ELF virtual address to the function that holds the
// instruction (the outermost of an inlined chain). Go binaries are
// resolved through the pclntab, anything else, and C code linked into Go
// binaries, through .symtab, .dynsym and DWARF.
func (o *Object) Lookup(vaddr uint64) (Symbol, bool) {
	chain := o.LookupInlined(vaddr, nil)
	if len(chain) == 0 {
		return Symbol{}, false
	}
	return chain[len(chain)-1], true
}

// LookupInlined appends to dst the call chain at vaddr, innermost first:
// the inlined functions (Inlined set) and then the function that holds
// the instruction. It appends nothing when no table knows the address.
func (o *Object) LookupInlined(vaddr uint64, dst []Symbol) []Symbol {
	if o.gotab != nil {
		if fn, file, line, ok := o.gotab.lookup(vaddr); ok {
			return append(dst, Symbol{Function: fn, File: file, Line: line})
		}
	}
	s, symOK := o.syms.lookup(vaddr)
	var name string
	if symOK {
		// A name unreadable (its file truncated under the mapping)
		// is no symbol.
		name = o.syms.name(s)
		symOK = name != ""
	}
	var locs []location
	if o.dwarf != nil {
		locs = o.dwarfLocations(vaddr)
	}
	if len(locs) == 0 {
		if !symOK {
			return dst
		}
		return append(dst, Symbol{Function: o.demangle(name)})
	}
	outer := &locs[len(locs)-1]
	switch {
	case symOK:
		// The symbol table names the physical function as every other
		// tool shows it (demangled, with C++ parameters).
		outer.function = o.demangle(name)
	case outer.function == "":
		return dst
	}
	for i, l := range locs {
		if l.function == "" {
			// An inlined subroutine without a name would make up a frame.
			continue
		}
		dst = append(dst, Symbol{Function: l.function, File: l.file, Line: l.line, Inlined: i < len(locs)-1})
	}
	return dst
}

// dwarfLocations is lazyDWARF.locations guarded: DWARF stored
// uncompressed is read through a mapping of the file, and a file
// truncated under it answers nothing (counted by elfmap.Faults) rather
// than crash on SIGBUS.
func (o *Object) dwarfLocations(vaddr uint64) (locs []location) {
	ok := true
	defer func() {
		if !ok {
			locs = nil
		}
	}()
	defer elfmap.Recover(elfmap.Guard(), &ok)
	return o.dwarf.locations(vaddr)
}

// Symbols appends to dst the call chain at runtime address addr of
// mapping m, innermost inlined function first (LookupInlined of the
// address's ELF virtual address). It appends nothing when the address is
// outside m, in no loadable segment, or known to no table: the caller
// keeps such a frame as an address in its mapping, never a guessed name.
func (o *Object) Symbols(dst []Symbol, m Mapping, addr uint64) []Symbol {
	vaddr, ok := o.VirtualAddress(m, addr)
	if !ok {
		return dst
	}
	return o.LookupInlined(vaddr, dst)
}

// demangle turns C++ and Rust names into readable ones, memoized because
// the same hot functions are looked up for every sample.
func (o *Object) demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.demangled[name]; ok {
		return d
	}
	d := demangle.Filter(name, demangle.NoClones)
	if o.demangled == nil {
		o.demangled = make(map[string]string)
	}
	o.demangled[name] = d
	return d
}

// Size is the memory the object holds, as the cache's byte bound counts
// it (size).
func (o *Object) Size() int64 { return o.size() }

// size estimates the memory the object holds, for the cache's byte bound:
// symbol entries with their names, the Go function table and the DWARF
// tables. The Go pclntab itself is shared (a gopclntab.Store) and counted there.
func (o *Object) size() int64 {
	n := int64(256 + len(o.progs)*80)
	if o.syms != nil {
		// The names stay in the mapped string tables, but for the
		// tables debug/elf read (heap).
		n += int64(cap(o.syms.syms))*int64(unsafe.Sizeof(symbol{})) + int64(o.syms.heap)
	}
	if o.gotab != nil {
		n += o.gotab.size()
	}
	return n + int64(o.dwarf.size())
}
