package tracectx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
)

// LocationKind says how the eBPF program reaches a thread's
// otel_thread_ctx_v1 from the thread pointer (task->thread.fsbase).
type LocationKind uint8

const (
	// LocationNone: the process publishes no thread context.
	LocationNone LocationKind = iota
	// LocationStaticTP: the variable is at tp + Offset (Offset < 0 on x86-64, >= 16 on aarch64);
	// one read. Main program, libraries loaded at start-up, and dlopen'ed
	// libraries that got static TLS.
	LocationStaticTP
	// LocationDTV: the variable is in dynamic TLS: dtv = *(fsbase + 8);
	// block = dtv[ModuleID].val (16-byte entries); variable at block + Offset.
	LocationDTV
)

func (k LocationKind) String() string {
	switch k {
	case LocationNone:
		return "none"
	case LocationStaticTP:
		return "static-tp"
	case LocationDTV:
		return "dtv"
	}
	return fmt.Sprintf("LocationKind(%d)", uint8(k))
}

// Location is where otel_thread_ctx_v1 lives for every thread of one
// process; the lead passes it to the eBPF program per process.
type Location struct {
	Kind LocationKind
	// Offset: from the thread pointer (StaticTP) or from the module's TLS
	// block (DTV).
	Offset int64
	// ModuleID is the TLS module id (DTV only), >= 1.
	ModuleID uint64
	// Musl: the process runs on musl, whose DTV (DTV only) is an array of
	// block pointers with the slot count in dtv[0], where glibc's has
	// 16-byte entries and the count in dtv[-1].
	Musl bool
}

// glibc x86-64 layout used by the DTV walk (sysdeps/x86_64/nptl/tls.h):
// tcbhead_t {void *tcb; dtv_t *dtv; ...}: the dtv pointer is at fsbase+8 and
// points at dtv[0] (the generation); dtv[-1].counter is the number of slots;
// each dtv_t is {void *val; void *to_free}.
// On aarch64 (sysdeps/aarch64/nptl/tls.h) tcbhead_t is {dtv_t *dtv; void
// *private}: the dtv pointer is at tp+0; the DTV itself is alike.
var tcbDTVOffset = map[string]uint64{"amd64": 8, "arm64": 0}[runtime.GOARCH]

const (
	dtvEntrySize   = 16
	dtvUnallocated = ^uint64(0) // TLS_DTV_UNALLOCATED: not yet touched by this thread
	maxModuleID    = 1 << 16    // sanity bound; glibc's dtv grows by 14 slots at a time
	maxStaticTLS   = 1 << 30    // a TP offset beyond this is not a real one
)

// ErrUnresolved: the GOT slots hold nothing usable yet (the process has not
// finished relocating, or a lazy TLSDESC is still pending); retry later.
var ErrUnresolved = errors.New("thread context TLS slot not resolved")

// Resolve reads the relocated GOT slots of v in the process memory mem,
// whose module is loaded with bias (run-time address minus link-time
// address), and returns the variable's Location. mainProgram says the module
// is the process's executable (module id 1), where no slot is needed.
func Resolve(mem io.ReaderAt, v *TLSVar, bias uint64, mainProgram bool) (Location, error) {
	if mainProgram && v.Defined {
		off, err := v.MainProgramTPOffset()
		if err != nil {
			return Location{}, err
		}
		return Location{Kind: LocationStaticTP, Offset: off}, nil
	}
	var errs []error
	// A TP offset is cheapest for the eBPF program; try those slots first.
	for _, pass := range []RelocKind{RelocTPOff, RelocTLSDesc, RelocDTPMod} {
		for _, r := range v.Relocs {
			if r.Kind != pass {
				continue
			}
			loc, err := resolveSlot(mem, v, r, bias+r.Addr)
			if err == nil {
				return loc, nil
			}
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return Location{}, fmt.Errorf("resolve %s in %s: no GOT slot reaches it: %w", v.name(), v.Path, ErrUnresolved)
	}
	return Location{}, fmt.Errorf("resolve %s in %s: %w", v.name(), v.Path, errors.Join(errs...))
}

func resolveSlot(mem io.ReaderAt, v *TLSVar, r TLSReloc, addr uint64) (Location, error) {
	var b [16]byte
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		return Location{}, fmt.Errorf("read %v slot at %#x: %w", r.Kind, addr, err)
	}
	w0 := binary.LittleEndian.Uint64(b[0:8])
	w1 := binary.LittleEndian.Uint64(b[8:16])
	switch r.Kind {
	case RelocTPOff:
		return staticTP(v.Machine, int64(w0), r, addr)
	case RelocTLSDesc:
		// Static: arg is the (negative) TP offset. Dynamic: arg points to
		// struct tlsdesc_dynamic_arg {size_t module, offset; size_t gen}.
		if int64(w1) < 0 {
			return staticTP(v.Machine, int64(w1), r, addr)
		}
		if w0 == 0 || w1 == 0 {
			return Location{}, fmt.Errorf("TLSDESC slot at %#x is empty: %w", addr, ErrUnresolved)
		}
		var arg [16]byte
		if _, err := mem.ReadAt(arg[:], int64(w1)); err != nil {
			return Location{}, fmt.Errorf("read TLSDESC argument at %#x: %w", w1, err)
		}
		return dtv(binary.LittleEndian.Uint64(arg[0:8]), binary.LittleEndian.Uint64(arg[8:16]), addr)
	case RelocDTPMod:
		off := w1
		if !r.Named {
			off = v.Value // local-dynamic: the offset is an immediate in the code
		}
		return dtv(w0, off, addr)
	}
	return Location{}, fmt.Errorf("slot at %#x: unknown relocation kind %v", addr, r.Kind)
}

func staticTP(machine elf.Machine, off int64, r TLSReloc, addr uint64) (Location, error) {
	// Static TLS lies below the thread pointer on x86-64 (variant II)
	// and past the 16-byte TCB above it on aarch64 (variant I).
	bad := off >= 0 || off < -maxStaticTLS
	if machine == elf.EM_AARCH64 {
		bad = off < aarch64TCBSize || off > maxStaticTLS
	}
	if bad {
		return Location{}, fmt.Errorf("%v slot at %#x holds TP offset %d: %w", r.Kind, addr, off, ErrUnresolved)
	}
	return Location{Kind: LocationStaticTP, Offset: off}, nil
}

func dtv(module, off, addr uint64) (Location, error) {
	if module == 0 || module > maxModuleID || off > maxStaticTLS {
		return Location{}, fmt.Errorf("slot at %#x gives module %d offset %d: %w", addr, module, off, ErrUnresolved)
	}
	return Location{Kind: LocationDTV, ModuleID: module, Offset: int64(off)}, nil
}

// ErrNoTLSBlock: the thread has not allocated the module's dynamic TLS
// block yet, so it has never entered a span.
var ErrNoTLSBlock = errors.New("thread has no TLS block for the module")

// Address returns the address of the thread's otel_thread_ctx_v1, given the
// thread pointer fsbase; it performs the same reads as the eBPF program.
func (l Location) Address(mem io.ReaderAt, fsbase uint64) (uint64, error) {
	switch l.Kind {
	case LocationStaticTP:
		return fsbase + uint64(l.Offset), nil
	case LocationDTV:
		if l.Musl {
			return l.muslAddress(mem, fsbase)
		}
		dtvp, err := readU64(mem, fsbase+tcbDTVOffset)
		if err != nil {
			return 0, fmt.Errorf("read dtv pointer: %w", err)
		}
		slots, err := readU64(mem, dtvp-dtvEntrySize)
		if err != nil {
			return 0, fmt.Errorf("read dtv length: %w", err)
		}
		if l.ModuleID > slots {
			return 0, fmt.Errorf("dtv has %d slots, module %d: %w", slots, l.ModuleID, ErrNoTLSBlock)
		}
		block, err := readU64(mem, dtvp+l.ModuleID*dtvEntrySize)
		if err != nil {
			return 0, fmt.Errorf("read dtv[%d]: %w", l.ModuleID, err)
		}
		if block == 0 || block == dtvUnallocated {
			return 0, fmt.Errorf("dtv[%d] = %#x: %w", l.ModuleID, block, ErrNoTLSBlock)
		}
		return block + uint64(l.Offset), nil
	}
	return 0, fmt.Errorf("address of %s: location %v", ThreadContextSymbol, l.Kind)
}

// musl's struct pthread starts {self, dtv} on x86-64 (TLS below the
// thread pointer), so its dtv pointer is where glibc's is; dtv[0] counts
// the modules and dtv[i] is module i's block (DTP_OFFSET is 0 on x86-64),
// set for every thread, old ones included, when a module is dlopen'ed
// (ldso/dynlink.c install_new_tls).
const muslDTVEntrySize = 8

func (l Location) muslAddress(mem io.ReaderAt, fsbase uint64) (uint64, error) {
	if runtime.GOARCH != "amd64" {
		return 0, fmt.Errorf("address of %s: musl dynamic TLS is read on x86-64 only", ThreadContextSymbol)
	}
	dtvp, err := readU64(mem, fsbase+tcbDTVOffset)
	if err != nil {
		return 0, fmt.Errorf("read dtv pointer: %w", err)
	}
	slots, err := readU64(mem, dtvp)
	if err != nil {
		return 0, fmt.Errorf("read dtv length: %w", err)
	}
	if l.ModuleID > slots {
		return 0, fmt.Errorf("dtv has %d slots, module %d: %w", slots, l.ModuleID, ErrNoTLSBlock)
	}
	block, err := readU64(mem, dtvp+l.ModuleID*muslDTVEntrySize)
	if err != nil {
		return 0, fmt.Errorf("read dtv[%d]: %w", l.ModuleID, err)
	}
	if block == 0 {
		return 0, fmt.Errorf("dtv[%d] = 0: %w", l.ModuleID, ErrNoTLSBlock)
	}
	return block + uint64(l.Offset), nil
}

// ReadThreadContext reads and decodes the thread context of the thread whose
// thread pointer is fsbase, as the eBPF program does at sample time. ok is
// false when the thread is outside any span (NULL pointer, no TLS block).
func ReadThreadContext(mem io.ReaderAt, fsbase uint64, l Location) (c Context, ok bool, err error) {
	addr, err := l.Address(mem, fsbase)
	if errors.Is(err, ErrNoTLSBlock) {
		return Context{}, false, nil
	}
	if err != nil {
		return Context{}, false, err
	}
	ptr, err := readU64(mem, addr)
	if err != nil {
		return Context{}, false, fmt.Errorf("read %s at %#x: %w", ThreadContextSymbol, addr, err)
	}
	if ptr == 0 {
		return Context{}, false, nil
	}
	buf := make([]byte, RecordMaxSize)
	// The record may end near the end of a mapping: read the header, then
	// exactly the attributes it announces.
	if _, err := mem.ReadAt(buf[:RecordHeaderSize], int64(ptr)); err != nil {
		return Context{}, false, fmt.Errorf("read record at %#x: %w", ptr, err)
	}
	n := int(binary.NativeEndian.Uint16(buf[26:28]))
	if n > RecordMaxAttrs {
		n = RecordMaxAttrs // ReadRecord rejects it; do not read past the bound
	}
	if n > 0 {
		if _, err := mem.ReadAt(buf[RecordHeaderSize:RecordHeaderSize+n], int64(ptr)+RecordHeaderSize); err != nil {
			return Context{}, false, fmt.Errorf("read record attributes at %#x: %w", ptr, err)
		}
	}
	c, err = ReadRecord(buf[:RecordHeaderSize+n])
	if err != nil {
		return Context{}, false, err
	}
	return c, true, nil
}

func readU64(mem io.ReaderAt, addr uint64) (uint64, error) {
	var b [8]byte
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// name is the variable's symbol.
func (v *TLSVar) name() string {
	if v.Symbol == "" {
		return ThreadContextSymbol
	}
	return v.Symbol
}
