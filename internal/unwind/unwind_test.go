package unwind

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

func openTable(t testing.TB, path string) *Table {
	t.Helper()
	tab, err := OpenTable(path)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestAgainstReadelf checks every row readelf finds in the frame section.
func TestAgainstReadelf(t *testing.T) {
	tests := []struct {
		bin, section string
	}{
		{fixture("chain-gcc"), ".eh_frame"},
		{fixture("chain-clang"), ".eh_frame"},
		{fixture("chain-gcc-debugframe"), ".debug_frame"},
		{libc, ".eh_frame"},
	}
	for _, tt := range tests {
		t.Run(tt.bin, func(t *testing.T) {
			tab := openTable(t, tt.bin)
			n := 0
			for _, r := range readelfRules(t, tt.bin) {
				if r.section != tt.section {
					continue
				}
				n++
				got, err := tab.RuleAt(r.pc)
				if err != nil {
					t.Fatalf("RuleAt(%#x): %v", r.pc, err)
				}
				if r.expr && got.Kind == SPOffset {
					continue // a PLT's expression, evaluated (TestPLTRule)
				}
				if got.CFA() != r.rule {
					t.Errorf("RuleAt(%#x) = %v, readelf says %v", r.pc, got, r.rule)
				}
				if got != r.full {
					t.Errorf("RuleAt(%#x): fp %d at %d, outermost %v; readelf says fp %d at %d, outermost %v",
						r.pc, got.FP, got.FPOffset, got.Outermost, r.full.FP, r.full.FPOffset, r.full.Outermost)
				}
			}
			if n < 10 {
				t.Fatalf("readelf found only %d rows in %s", n, tt.section)
			}
			t.Logf("%d rows agree", n)
		})
	}
}

func TestCFARules(t *testing.T) {
	gcc := nmSymbols(t, fixture("chain-gcc"), false)
	clang := nmSymbols(t, fixture("chain-clang"), false)
	dbg := nmSymbols(t, fixture("chain-gcc-debugframe"), false)
	tests := []struct {
		name string
		bin  string
		pc   uint64
		want Rule
	}{
		{"gcc leaf entry", "chain-gcc", gcc["leaf"], Rule{Kind: SPOffset, Offset: 8}},
		{"gcc leaf body has no frame", "chain-gcc", gcc["leaf"] + 7, Rule{Kind: SPOffset, Offset: 8}},
		{"gcc leaf with sub rsp", "chain-gcc", gcc["leaf_nofp"] + 7, Rule{Kind: SPOffset, Offset: 408}},
		{"gcc leaf_stack keeps rbp", "chain-gcc", gcc["leaf_stack"] + 8, Rule{Kind: FPOffset, Offset: 16}},
		{"gcc d after push", "chain-gcc", gcc["d"] + 1, Rule{Kind: SPOffset, Offset: 16}},
		{"clang d entry", "chain-clang", clang["d"], Rule{Kind: SPOffset, Offset: 8}},
		{"clang d body", "chain-clang", clang["d"] + 4, Rule{Kind: FPOffset, Offset: 16}},
		{"clang leaf body keeps frame", "chain-clang", clang["leaf"] + 4, Rule{Kind: FPOffset, Offset: 16}},
		{"debug_frame leaf with sub rsp", "chain-gcc-debugframe", dbg["leaf_nofp"] + 7, Rule{Kind: SPOffset, Offset: 408}},
		{"no FDE", "chain-gcc", 1, Rule{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pc == 0 {
				t.Fatal("symbol missing from nm")
			}
			got, err := openTable(t, fixture(tt.bin)).RuleAt(tt.pc)
			if err != nil {
				t.Fatal(err)
			}
			if got.CFA() != tt.want {
				t.Errorf("RuleAt(%#x) = %v, want %v", tt.pc, got, tt.want)
			}
		})
	}
}

// TestLibcSyscall: a thread blocked in clock_nanosleep sits on its syscall
// instruction, in a function without a frame pointer (Debian's glibc).
func TestLibcSyscall(t *testing.T) {
	f, err := elf.Open(libc)
	if err != nil {
		t.Skipf("no %s: %v", libc, err)
	}
	defer f.Close()
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	tab := openTable(t, libc)
	found := 0
	for _, s := range dyn {
		if s.Name != "clock_nanosleep" && s.Name != "nanosleep" {
			continue
		}
		code := make([]byte, s.Size)
		text := f.Section(".text")
		if _, err := text.ReadAt(code, int64(s.Value-text.Addr)); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(code); {
			inst, err := x86asm.Decode(code[off:], 64)
			if err != nil {
				off++
				continue
			}
			if inst.Op == x86asm.SYSCALL {
				pc := s.Value + uint64(off)
				r, err := tab.RuleAt(pc)
				if err != nil {
					t.Fatal(err)
				}
				if r.Kind != SPOffset {
					t.Errorf("%s syscall at %#x: rule %v, want RSP-based", s.Name, pc, r)
				}
				found++
			}
			off += inst.Len
		}
	}
	if found == 0 {
		t.Fatal("no syscall instruction found in libc's nanosleep functions")
	}
}

// TestGoPcsp uses the pclntab of Go binaries that have neither .eh_frame
// nor .debug_frame.
func TestGoPcsp(t *testing.T) {
	for _, bin := range []string{"goprog", "goprog-sw", "goprog-stripped", "goprog-pie"} {
		t.Run(bin, func(t *testing.T) {
			f, err := elf.Open(fixture(bin))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// Internally linked Go has no .eh_frame; its .debug_frame, if
			// any, must be ignored in favour of the pclntab.
			if f.Section(".eh_frame") != nil {
				t.Fatalf("%s has .eh_frame", bin)
			}
			p, err := gopclntab.Find(f)
			if err != nil {
				t.Fatal(err)
			}
			defer runtime.KeepAlive(p) // gosym reads p.Data, maybe a mapping p owns
			gt, err := gosym.NewTable(nil, gosym.NewLineTable(p.Data, p.TextStart))
			if err != nil {
				t.Fatal(err)
			}
			tab := openTable(t, fixture(bin))
			text := f.Section(".text")

			alpha := gt.LookupFunc("main.alpha")
			code := make([]byte, alpha.End-alpha.Entry)
			if _, err := text.ReadAt(code, int64(alpha.Entry-text.Addr)); err != nil {
				t.Fatal(err)
			}
			// Walk the prologue: before PUSHQ BP no frame, between PUSHQ and
			// MOVQ SP,BP the old RBP, after it RBP is the frame.
			want := Rule{Kind: SPOffset, Offset: 8}
			for off := 0; off < len(code); {
				inst, err := x86asm.Decode(code[off:], 64)
				if err != nil {
					t.Fatalf("decode at %#x: %v", alpha.Entry+uint64(off), err)
				}
				got, err := tab.RuleAt(alpha.Entry + uint64(off))
				if err != nil {
					t.Fatal(err)
				}
				if got.CFA() != want {
					t.Errorf("main.alpha+%d (%v): %v, want %v", off, inst, got, want)
				}
				switch {
				case inst.Op == x86asm.PUSH && inst.Args[0] == x86asm.RBP:
					want = Rule{Kind: SPOffset, Offset: 16}
				case inst.Op == x86asm.MOV && inst.Args[0] == x86asm.RBP && inst.Args[1] == x86asm.RSP:
					want = Rule{Kind: FPOffset, Offset: 16}
				}
				if inst.Op == x86asm.SUB || inst.Op == x86asm.CALL || inst.Op == x86asm.RET {
					break
				}
				off += inst.Len
			}

			if r, _ := tab.RuleAt(alpha.Entry); r.Outermost {
				t.Errorf("main.alpha is marked outermost")
			}
			if goexit := gt.LookupFunc("runtime.goexit"); goexit == nil {
				t.Error("no runtime.goexit")
			} else if r, _ := tab.RuleAt(goexit.Entry); !r.Outermost {
				t.Errorf("runtime.goexit (TOPFRAME) is not marked outermost: %+v", r)
			}

			gamma := gt.LookupFunc("main.gamma")
			if r, _ := tab.RuleAt(gamma.Entry + 4); r.CFA() != (Rule{Kind: SPOffset, Offset: 8}) {
				t.Errorf("main.gamma (frameless leaf) body: %v, want rsp+8", r)
			}
		})
	}
}

func TestRecoverCaller(t *testing.T) {
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[0:], 0x401234)
	binary.LittleEndian.PutUint64(stack[16:], 0x405678)
	tests := []struct {
		name   string
		rule   Rule
		stack  []byte
		want   uint64
		wantOK bool
	}{
		{"leaf entry: ra at sp", Rule{Kind: SPOffset, Offset: 8}, stack, 0x401234, true},
		{"sub rsp 16: ra at sp+16", Rule{Kind: SPOffset, Offset: 24}, stack, 0x405678, true},
		{"frame set up: FP walk is right", Rule{Kind: FPOffset, Offset: 16}, stack, 0, false},
		{"unknown rule", Rule{}, stack, 0, false},
		{"ra beyond the copy", Rule{Kind: SPOffset, Offset: 72}, stack, 0, false},
		{"zero word is no address", Rule{Kind: SPOffset, Offset: 16}, stack, 0, false},
		{"misaligned offset", Rule{Kind: SPOffset, Offset: 12}, stack, 0, false},
		{"empty copy", Rule{Kind: SPOffset, Offset: 8}, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra, ok := RecoverCaller(tt.rule, 0x7ffc0000, tt.stack)
			if ra != tt.want || ok != tt.wantOK {
				t.Errorf("RecoverCaller(%v) = %#x, %v; want %#x, %v", tt.rule, ra, ok, tt.want, tt.wantOK)
			}
			if tt.wantOK && tt.rule.FrameSetUp() {
				t.Errorf("rule %v recovers a caller but says the frame is set up", tt.rule)
			}
		})
	}
}

// TestPLTRule checks the rule in a lazy PLT against its instructions: the
// CFA is rsp+8 until the entry's push has run, rsp+16 after, in every
// entry, as the linker's CFA expression says.
func TestPLTRule(t *testing.T) {
	path := fixture("chain-gcc")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plt := f.Section(".plt")
	if plt == nil {
		t.Fatal("no .plt in the fixture")
	}
	code, err := plt.Data()
	if err != nil {
		t.Fatal(err)
	}
	tab := openTable(t, path)
	checked := 0
	for entry := 16; entry+16 <= len(code); entry += 16 { // entry 0 is the resolver's
		want := Rule{Kind: SPOffset, Offset: 8}
		for off := entry; off < entry+16; {
			inst, err := x86asm.Decode(code[off:], 64)
			if err != nil {
				t.Fatalf("decode .plt+%#x: %v", off, err)
			}
			got, err := tab.RuleAt(plt.Addr + uint64(off))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf(".plt+%#x (%v): %v, want %v", off, inst, got, want)
			}
			checked++
			if inst.Op == x86asm.PUSH {
				want = Rule{Kind: SPOffset, Offset: 16}
			}
			off += inst.Len
		}
	}
	if checked == 0 {
		t.Fatal("no PLT entry checked")
	}
}
