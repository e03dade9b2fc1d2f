package check

import (
	"debug/elf"
	"debug/gosym"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/spanprof/spanprof/internal/unwind"
)

// fpStats counts how the functions of one file treat the frame pointer.
type fpStats struct {
	// Checked counts the C/C++ (non-Go, non-toolchain) functions decoded.
	Checked   int
	WithFrame int
	// Missing are functions that call others yet set up no frame: a
	// sample below them loses every caller above.
	Missing []string
	// Leaf are functions without a call and without a frame: the unwinder
	// can recover their caller from the return address at the stack top.
	Leaf []string
	// LeafNoCFI are the leaves without an unwind rule (.eh_frame,
	// .debug_frame) at their entry: the unwinder cannot recover their
	// caller, so a sample in them loses it.
	LeafNoCFI []string
	// Toolchain are crt start-up functions, never a violation.
	Toolchain []string
	// GoFuncs counts Go functions, which follow Go's own frame rules.
	GoFuncs int
	// Source names the symbol table the functions came from.
	Source string
}

// Share is the fraction of checked functions that set up a frame pointer.
func (s fpStats) Share() float64 {
	if s.Checked == 0 {
		return 1
	}
	return float64(s.WithFrame) / float64(s.Checked)
}

// toolchainNames are functions that come from crt*.o, libgcc or the Go
// cgo runtime rather than from the user's sources; they are compiled by
// the distribution with its own flags, so reporting them would make every
// binary fail.
var toolchainNames = map[string]bool{
	"_start": true, "_init": true, "_fini": true, "frame_dummy": true,
	"register_tm_clones": true, "deregister_tm_clones": true,
	"__do_global_dtors_aux": true, "__do_global_ctors_aux": true,
	"__libc_csu_init": true, "__libc_csu_fini": true, "__libc_csu_irel": true,
	"_dl_relocate_static_pie": true, "__gmon_start__": true,
	"__stack_chk_fail_local": true, "atexit": true,
	"crosscall2": true, "crosscall1_amd64": true, "crosscall_amd64": true, "crosscall1": true,
	"call_once": true, "pthread_key_destructor": true, "call_weak_fn": true,
}

var toolchainPrefixes = []string{"__libc_csu_", "_cgo_", "x_cgo_", "__cgo_", "__x86.get_pc_thunk"}

func isToolchain(name string) bool {
	if toolchainNames[name] {
		return true
	}
	for _, p := range toolchainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// isGoFunc tells Go functions (including Go assembly such as aeshashbody)
// from cgo C functions in a Go binary: only Go functions have an entry in
// .gopclntab. Without a readable table, Go's package-qualified names are
// the fallback.
func isGoFunc(tab *gosym.Table, s elf.Symbol) bool {
	if tab != nil {
		fn := tab.PCToFunc(s.Value)
		return fn != nil && fn.Entry == s.Value
	}
	return strings.Contains(s.Name, ".") || strings.HasPrefix(s.Name, "go:") || strings.HasPrefix(s.Name, "type:")
}

// goTable parses .gopclntab; nil when it cannot. Function addresses in
// the table are relative to runtime.text, which is not the start of .text
// when the external linker put C start-up code first.
func goTable(f *elf.File, syms []elf.Symbol) (tab *gosym.Table) {
	sec := f.Section(".gopclntab")
	if sec == nil {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	start := uint64(0)
	if text := f.Section(".text"); text != nil {
		start = text.Addr
	}
	for _, s := range syms {
		if s.Name == "runtime.text" {
			start = s.Value
			break
		}
	}
	defer func() {
		// debug/gosym trusts the table it is given; a corrupt one must
		// not take the checker down.
		if recover() != nil {
			tab = nil
		}
	}()
	tab, err = gosym.NewTable(nil, gosym.NewLineTable(data, start))
	if err != nil {
		return nil
	}
	return tab
}

// isFragment recognises GCC's split-off cold blocks (foo.cold, foo.cold.3):
// they run inside foo's frame, so they have no prologue of their own.
func isFragment(name string) bool {
	return strings.HasSuffix(name, ".cold") || strings.Contains(name, ".cold.")
}

// codeSections serves function bytes from a file's executable sections.
type codeSections struct {
	secs []*elf.Section
	data map[*elf.Section][]byte
}

func (c *codeSections) bytes(addr, size uint64) []byte {
	for _, s := range c.secs {
		if addr < s.Addr || addr-s.Addr >= s.Size {
			continue
		}
		d, ok := c.data[s]
		if !ok {
			d, _ = s.Data()
			c.data[s] = d
		}
		off := addr - s.Addr
		if off >= uint64(len(d)) {
			return nil
		}
		end := off + size
		if end > uint64(len(d)) || end < off {
			end = uint64(len(d))
		}
		return d[off:end]
	}
	return nil
}

// analyzeFramePointers decodes every sized function symbol of syms whose
// address lies in an executable section of f. Addresses rather than
// section indexes are used so symbols from a separate debug file work.
func analyzeFramePointers(f *elf.File, syms []elf.Symbol, goBinary bool) fpStats {
	var goTab *gosym.Table
	if goBinary {
		goTab = goTable(f, syms)
	}
	code := &codeSections{data: map[*elf.Section][]byte{}}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type == elf.SHT_PROGBITS {
			code.secs = append(code.secs, s)
		}
	}
	scan := scanX86
	if f.Machine == elf.EM_AARCH64 {
		scan = scanAArch64
	}
	var st fpStats
	var table *unwindTable
	seen := map[uint64]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF {
			continue
		}
		if isToolchain(s.Name) {
			// crt objects often give these no size; list them anyway.
			st.Toolchain = append(st.Toolchain, s.Name)
			continue
		}
		if s.Size == 0 || seen[s.Value] {
			continue
		}
		seen[s.Value] = true // aliases (memcpy/__memcpy) share one body
		switch {
		case goBinary && isGoFunc(goTab, s):
			st.GoFuncs++
			continue
		case isFragment(s.Name):
			continue
		}
		body := code.bytes(s.Value, s.Size)
		if len(body) == 0 {
			continue
		}
		frame, call := scan(body)
		st.Checked++
		switch {
		case frame:
			st.WithFrame++
		case call:
			st.Missing = append(st.Missing, s.Name)
		default:
			st.Leaf = append(st.Leaf, s.Name)
			if !hasCFI(f, &table, s.Value, s.Size) {
				st.LeafNoCFI = append(st.LeafNoCFI, s.Name)
			}
		}
	}
	if st.GoFuncs == 0 && goTab != nil {
		// Stripped Go binaries (go test, -ldflags=-s) keep .gopclntab.
		st.GoFuncs = len(goTab.Funcs)
	}
	sort.Strings(st.Missing)
	sort.Strings(st.Leaf)
	sort.Strings(st.LeafNoCFI)
	sort.Strings(st.Toolchain)
	return st
}

// scanX86 reports whether an x86-64 function body sets up a frame pointer
// and whether it calls anything. A frame is `push rbp` followed later by `mov rbp,
// rsp` (GCC may schedule other instructions between the two, and
// shrink-wrapping may put them after an early-exit test), or `enter`.
func scanX86(body []byte) (frame, call bool) {
	pushed := false
	for off := 0; off < len(body) && !(frame && call); {
		inst, err := x86asm.Decode(body[off:], 64)
		if err != nil || inst.Len == 0 {
			off++
			continue
		}
		off += inst.Len
		switch inst.Op {
		case x86asm.PUSH:
			if inst.Args[0] == x86asm.RBP {
				pushed = true
			}
		case x86asm.MOV:
			if pushed && inst.Args[0] == x86asm.RBP && inst.Args[1] == x86asm.RSP {
				frame = true
			}
		case x86asm.ENTER:
			frame = true
		case x86asm.CALL, x86asm.LCALL:
			call = true
		}
	}
	return frame, call
}

// unwindTable is the file's unwind table, read on the first leaf; err
// keeps a failure so it is not retried per function.
type unwindTable struct {
	t   *unwind.Table
	err error
}

// hasCFI reports whether the unwinder recovers the caller of the
// frameless function at [addr, addr+size) from its unwind rules, as
// spanprof's recording does for GCC's leaves: on x86-64 any
// stack-pointer-based rule does (the return address is at CFA-8); on
// AArch64 the caller comes from the link register, which the unwinder
// uses only where the CFA is sp+0, so every instruction must have that
// rule.
func hasCFI(f *elf.File, table **unwindTable, addr, size uint64) bool {
	if *table == nil {
		t, err := unwind.NewTable(f)
		*table = &unwindTable{t, err}
	}
	if (*table).err != nil {
		return false
	}
	t := (*table).t
	if f.Machine != elf.EM_AARCH64 {
		r, err := t.RuleAt(addr)
		return err == nil && r.Kind == unwind.SPOffset
	}
	for pc := addr; pc < addr+size; pc += 4 {
		r, err := t.RuleAt(pc)
		if err != nil || r.Kind != unwind.SPOffset || r.Offset != 0 {
			return false
		}
	}
	return true
}
