package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// Which instructions keep a leaf's rule (CFA = sp, the return address in
// x30): those of arm64's vDSO clock_gettime, and not a frame record's
// store, a stack allocation, a call, a write to x29 or x30, a writeback
// to sp, an instruction the decoder does not know, or the signal-return
// trampoline's system call.
func TestLeafInsn(t *testing.T) {
	for _, tc := range []struct {
		insn uint32
		want bool
	}{
		{0xd503233f, true},  // paciasp
		{0xd50323bf, true},  // autiasp
		{0xd503245f, true},  // bti c
		{0x8b2463e4, true},  // add x4, sp, x4
		{0xf940009f, true},  // ldr xzr, [x4]
		{0xa9000026, true},  // stp x6, x0, [x1]
		{0xd53be042, true},  // mrs x2, cntvct_el0
		{0x17ffffcf, true},  // b
		{0xd2800e28, true},  // mov x8, #113 (clock_gettime)
		{0xd4000001, true},  // svc #0
		{0xd65f03c0, true},  // ret
		{0xa9bf7bfd, false}, // stp x29, x30, [sp, #-16]!
		{0x910003fd, false}, // mov x29, sp
		{0xd10043ff, false}, // sub sp, sp, #16
		{0xd63f0040, false}, // blr x2
		{0x94000010, false}, // bl
		{0xa8c17bfd, false}, // ldp x29, x30, [sp], #16
		{0xf81f0fe0, false}, // str x0, [sp, #-16]!
		{0xaa0003fe, false}, // mov x30, x0
		{0xd2801168, false}, // mov x8, #139 (rt_sigreturn)
		{0xd65f0bff, false}, // retaa: not decoded
	} {
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, tc.insn)
		inst, err := arm64asm.Decode(b)
		if got := err == nil && leafInsn(inst); got != tc.want {
			t.Errorf("%#08x (%v, %v): leaf %v, want %v", tc.insn, inst, err, got, tc.want)
		}
	}
}

// An aarch64 object without frame sections, as arm64's vDSO is: its leaf
// functions get the leaf's rule, a function that calls or keeps a frame
// record none, nor does a signal-return trampoline.
func TestLeafFuncsRule(t *testing.T) {
	cc, err := exec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skip("no aarch64-linux-gnu-gcc (make deps installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "a.c")
	code := `
long leaf(long a, long b) { return a * 3 + b; }
long other(long);
long caller(long a) { return other(a) + 1; }
__asm__(".globl sigtramp\n.type sigtramp, %function\nsigtramp:\n mov x8, #139\n svc #0\n.size sigtramp, .-sigtramp\n");
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "a.so")
	out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
		"-Wl,--no-undefined-version", "-nostdlib", "-Wl,--unresolved-symbols=ignore-all", "-o", so, src).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Section(".eh_frame") != nil || f.Section(".debug_frame") != nil {
		t.Fatalf("%s has frame sections", so)
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"leaf": true, "caller": false, "sigtramp": false}
	leafRule := Rule{Kind: SPOffset, FP: FPSame, RA: RAInLR}
	for _, s := range syms {
		w, ok := want[s.Name]
		if !ok {
			continue
		}
		delete(want, s.Name)
		for pc := s.Value; pc < s.Value+s.Size; pc += 4 {
			r, _ := tab.RuleAt(pc)
			if w && r != leafRule || !w && r.Kind != Unknown {
				t.Errorf("RuleAt(%s+%#x) = %+v, want leaf's rule %v", s.Name, pc-s.Value, r, w)
			}
		}
	}
	if len(want) != 0 {
		t.Fatalf("symbols not found: %v", want)
	}
}
