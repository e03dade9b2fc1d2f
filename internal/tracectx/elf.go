package tracectx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Symbol names of the contract (SPEC "Trace-context sources").
const (
	ThreadContextSymbol = "otel_thread_ctx_v1"
	HookSymbol          = "spanprof_set_trace_context"
	// ElasticContextSymbol is Elastic APM's per-thread correlation
	// pointer (universal profiling integration), in the Java agent's
	// JVMTI library loaded after the JVM starts.
	ElasticContextSymbol = "elastic_apm_profiling_correlation_tls_v1"
)

// ErrNotFound: the ELF file neither defines nor references the symbol in
// .dynsym. Most binaries; not a failure.
var ErrNotFound = errors.New("symbol not in .dynsym")

// x86-64 dynamic relocation types that refer to a TLS variable through a
// GOT slot (System V x86-64 psABI, "Thread-Local Storage").
const (
	rX8664DTPMOD64 = 16
	rX8664TPOFF64  = 18
	rX8664TLSDESC  = 36
)

// AArch64 dynamic TLS relocation types with the same meanings (ELF for the
// Arm 64-bit Architecture, "Dynamic TLS relocations").
const (
	rA64TLSDTPMOD64 = 1028
	rA64TLSTPREL64  = 1030
	rA64TLSDESC     = 1031
)

// aarch64TCBSize is glibc's TLS_TCB_SIZE on aarch64 (TLS variant I): the
// thread pointer points to a 16-byte TCB {dtv, private}, and module 1's
// block follows it.
const aarch64TCBSize = 16

// RelocKind says what a GOT slot holds for the variable once ld.so has
// relocated it; that is what the agent reads at run time.
type RelocKind uint8

const (
	// RelocTPOff (R_X86_64_TPOFF64, initial-exec): 8 bytes, the signed
	// offset from the thread pointer.
	RelocTPOff RelocKind = iota + 1
	// RelocTLSDesc (R_X86_64_TLSDESC): 16 bytes {entry, arg}. arg is the TP
	// offset when ld.so gave the module static TLS (entry
	// _dl_tlsdesc_return), else a pointer to {module id, offset, gen}.
	RelocTLSDesc
	// RelocDTPMod (R_X86_64_DTPMOD64, general/local-dynamic): 8 bytes module
	// id, followed by the variable's offset in the block (R_X86_64_DTPOFF64)
	// when the relocation names the symbol.
	RelocDTPMod
)

func (k RelocKind) String() string {
	switch k {
	case RelocTPOff:
		return "TPOFF64"
	case RelocTLSDesc:
		return "TLSDESC"
	case RelocDTPMod:
		return "DTPMOD64"
	}
	return fmt.Sprintf("RelocKind(%d)", uint8(k))
}

// TLSReloc is one GOT slot through which the module reaches the variable.
type TLSReloc struct {
	Kind RelocKind
	// Addr is the link-time address of the slot (r_offset); add the load
	// bias for the run-time address.
	Addr uint64
	// Named is false for a module-local relocation (symbol index 0), whose
	// addend, not the symbol, selects the variable.
	Named  bool
	Addend int64
}

// TLSVar is what an ELF file says about otel_thread_ctx_v1: enough to find
// the variable of any thread of a process that maps the file.
type TLSVar struct {
	Path string
	// Symbol is the variable's name (ThreadContextSymbol unless set).
	Symbol string
	// Defined: the file holds the variable (else it only references one
	// defined elsewhere and contributes GOT slots).
	Defined bool
	// Value is st_value: the offset of the variable in the module's TLS block.
	Value uint64
	// PT_TLS of the defining file, for the main-program offset.
	TLSVaddr, TLSMemsz, TLSAlign uint64
	// Executable: ET_EXEC, or ET_DYN with PT_INTERP (a PIE). Only such a file
	// can be the main program, whose TLS block ld.so places first.
	Executable bool
	Relocs     []TLSReloc
	// Machine is the file's architecture (EM_X86_64 or EM_AARCH64), which
	// sets the TLS layout.
	Machine elf.Machine
}

// MainProgramTPOffset returns the variable's offset from the thread pointer
// when this file is the main program: glibc (x86-64, TLS variant II) puts
// module 1's block right below the TCB, at tp - roundup(memsz - fb, align) - fb
// with fb = -p_vaddr mod align (elf/dl-tls.c, _dl_determine_tlsoffset); the
// linker uses the same value for local-exec accesses.
func (v *TLSVar) MainProgramTPOffset() (int64, error) {
	if !v.Defined || !v.Executable {
		return 0, fmt.Errorf("main program offset of %s: not an executable defining %s", v.Path, ThreadContextSymbol)
	}
	align := v.TLSAlign
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("main program offset of %s: PT_TLS alignment %d is not a power of two", v.Path, align)
	}
	firstbyte := -v.TLSVaddr & (align - 1)
	if v.Machine == elf.EM_AARCH64 {
		// Variant I: the block follows the TCB, at the first offset
		// aligned like it that leaves room for firstbyte.
		off := roundUp(aarch64TCBSize, align)
		if off-aarch64TCBSize < firstbyte {
			off += align
		}
		return int64(off-firstbyte) + int64(v.Value), nil
	}
	blockOff := roundUp(v.TLSMemsz-firstbyte, align) + firstbyte
	return int64(v.Value) - int64(blockOff), nil
}

func roundUp(x, align uint64) uint64 { return (x + align - 1) &^ (align - 1) }

// FindThreadContext reads openPath's .dynsym for otel_thread_ctx_v1 (STT_TLS)
// and its dynamic relocations for GOT slots that reach it. It returns
// ErrNotFound when the file neither defines nor references the variable.
func FindThreadContext(openPath string) (*TLSVar, error) {
	f, err := elf.Open(openPath)
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	return findThreadContext(f, openPath)
}

func findThreadContext(f *elf.File, path string) (*TLSVar, error) {
	ds, err := readDynsym(f)
	if errors.Is(err, elf.ErrNoSymbols) {
		return staticThreadContext(f, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read .dynsym of %s: %w", path, err)
	}
	return threadContextIn(f, ds, path)
}

// staticThreadContext looks the variable up in .symtab of a file without
// .dynsym: only a statically linked executable (musl-gcc -static; glibc's
// static binaries too) can be read this way, as the main program, and only
// while not stripped.
func staticThreadContext(f *elf.File, path string) (*TLSVar, error) {
	if f.Type != elf.ET_EXEC {
		return nil, fmt.Errorf("find %s in %s: %w", ThreadContextSymbol, path, ErrNotFound)
	}
	st, err := readSymtab(f)
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("find %s in %s (static, no .symtab): %w", ThreadContextSymbol, path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read .symtab of %s: %w", path, err)
	}
	return threadContextIn(f, st, path)
}

// threadContextIn is findThreadContext on a symbol table already read:
// .dynsym, or .symtab of a static executable (whose relocation sections,
// if any, never link to .dynsym, so none is taken for a slot).
func threadContextIn(f *elf.File, ds *dynsym, path string) (*TLSVar, error) {
	return tlsVarIn(f, ds, path, ThreadContextSymbol)
}

// FindTLSVar is FindThreadContext for the TLS variable name, looked up in
// .dynsym only.
func FindTLSVar(openPath, name string) (*TLSVar, error) {
	f, err := elf.Open(openPath)
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	ds, err := readDynsym(f)
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("find %s in %s: %w", name, openPath, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read .dynsym of %s: %w", openPath, err)
	}
	return tlsVarIn(f, ds, openPath, name)
}

// tlsVarIn finds the STT_TLS symbol name in ds and the relocations that
// reach it.
func tlsVarIn(f *elf.File, ds *dynsym, path, name string) (*TLSVar, error) {
	if f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("find %s in %s: %v %v not supported: %w", name, path, f.Class, f.Machine, ErrNotFound)
	}
	symIdx, sym, ok := ds.lookup(name, func(s elf.Symbol) bool { return elf.ST_TYPE(s.Info) == elf.STT_TLS })
	if !ok {
		return nil, fmt.Errorf("find %s in %s: %w", name, path, ErrNotFound)
	}
	v := &TLSVar{
		Path:       path,
		Symbol:     name,
		Defined:    sym.Section != elf.SHN_UNDEF,
		Value:      sym.Value,
		Executable: f.Type == elf.ET_EXEC,
		Machine:    f.Machine,
	}
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_TLS:
			v.TLSVaddr, v.TLSMemsz, v.TLSAlign = p.Vaddr, p.Memsz, p.Align
		case elf.PT_INTERP:
			if f.Type == elf.ET_DYN {
				v.Executable = true
			}
		}
	}
	var err error
	if v.Relocs, err = tlsRelocs(f, uint32(symIdx), v); err != nil {
		return nil, fmt.Errorf("read relocations of %s: %w", path, err)
	}
	return v, nil
}

// tlsRelocs collects the RELA entries of the dynamic relocation sections
// that reach the variable: those naming its symbol, and module-local ones
// (symbol 0) in the defining file whose addend is the variable's offset.
func tlsRelocs(f *elf.File, symIdx uint32, v *TLSVar) ([]TLSReloc, error) {
	var out []TLSReloc
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) >= len(f.Sections) || f.Sections[s.Link].Type != elf.SHT_DYNSYM {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Name, err)
		}
		for ; len(data) >= 24; data = data[24:] {
			off := binary.LittleEndian.Uint64(data[0:8])
			info := binary.LittleEndian.Uint64(data[8:16])
			addend := int64(binary.LittleEndian.Uint64(data[16:24]))
			sym, typ := uint32(info>>32), uint32(info)
			var kind RelocKind
			kind = relocKind(v.Machine, typ)
			if kind == 0 {
				continue
			}
			named := sym == symIdx
			local := sym == 0 && v.Defined &&
				(kind == RelocDTPMod || uint64(addend) == v.Value)
			if !named && !local {
				continue
			}
			out = append(out, TLSReloc{Kind: kind, Addr: off, Named: named, Addend: addend})
		}
	}
	return out, nil
}

// FindHook returns the file offset of spanprof_set_trace_context in
// openPath, where a uprobe is attached (cilium/ebpf's UprobeOptions.Address
// takes it as is). It returns ErrNotFound when the function is not exported.
func FindHook(openPath string) (uint64, error) {
	f, err := elf.Open(openPath)
	if err != nil {
		return 0, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	return findHook(f, openPath)
}

func findHook(f *elf.File, path string) (uint64, error) {
	ds, err := readDynsym(f)
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return 0, fmt.Errorf("find %s in %s: %w", HookSymbol, path, ErrNotFound)
		}
		return 0, fmt.Errorf("read .dynsym of %s: %w", path, err)
	}
	return hookIn(f, ds, path)
}

// hookIn is findHook on a .dynsym already read.
func hookIn(f *elf.File, ds *dynsym, path string) (uint64, error) {
	return funcOffset(f, ds, HookSymbol, path)
}

// funcOffset returns the file offset of the function name defined in
// ds: where a uprobe goes.
func funcOffset(f *elf.File, ds *dynsym, name, path string) (uint64, error) {
	_, s, ok := ds.lookup(name, func(s elf.Symbol) bool {
		return elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF
	})
	if !ok {
		return 0, fmt.Errorf("find %s in %s: %w", name, path, ErrNotFound)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
			return s.Value - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("find %s in %s: address %#x outside executable segments", name, path, s.Value)
}

// relocKind names a dynamic relocation type of machine that reaches a TLS
// variable through a GOT slot; 0 for any other type.
func relocKind(machine elf.Machine, typ uint32) RelocKind {
	switch {
	case machine == elf.EM_X86_64 && typ == rX8664TPOFF64, machine == elf.EM_AARCH64 && typ == rA64TLSTPREL64:
		return RelocTPOff
	case machine == elf.EM_X86_64 && typ == rX8664TLSDESC, machine == elf.EM_AARCH64 && typ == rA64TLSDESC:
		return RelocTLSDesc
	case machine == elf.EM_X86_64 && typ == rX8664DTPMOD64, machine == elf.EM_AARCH64 && typ == rA64TLSDTPMOD64:
		return RelocDTPMod
	}
	return 0
}
