package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func words(ws ...uint32) []byte {
	b := make([]byte, 4*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// The runs of stub instructions in a PLT past its header: each stub from
// its first instruction; the TLS descriptors' lazy trampoline, which
// pushes two registers, is left out, and so is a stub-like instruction
// that a branch does not precede.
func TestStubRuns(t *testing.T) {
	const (
		adrp  = 0xf00000f0 // adrp x16, page
		ldr   = 0xf9400611 // ldr x17, [x16, #8]
		add   = 0x91002210 // add x16, x16, #8
		br    = 0xd61f0220 // br x17
		bti   = 0xd503245f
		aut   = 0xd503219f // autia1716
		stp23 = 0xa9bf0fe2 // stp x2, x3, [sp, #-16]!
		adrp2 = 0xd0000b82 // adrp x2, page
		ldr2  = 0xf947f042 // ldr x2, [x2, #n]
		br2   = 0xd61f0040 // br x2
		movx0 = 0xaa1303e0 // mov x0, x19
	)
	code := words(
		adrp, ldr, add, br, // 0x100
		bti, adrp, ldr, add, aut, br, // 0x110
		stp23, adrp2, ldr2, br2, // 0x128: the trampoline
		adrp, ldr, add, br, // 0x138
		movx0, adrp, ldr, add, br, // 0x148: adrp after another instruction
	)
	got := stubRuns(code, 0x100)
	want := []span{{0x100, 0x128}, {0x138, 0x148}}
	if !slices.Equal(got, want) {
		t.Fatalf("stubRuns = %#x, want %#x", got, want)
	}
}

// A real aarch64 shared object's PLT, as the cross toolchain links it:
// every stub has CFA = sp and the return address in x30, the header none;
// an x86-64 object has no such source (its linker writes the PLT's rules).
func TestPLTStubsRule(t *testing.T) {
	cc, err := exec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skip("no aarch64-linux-gnu-gcc (make deps installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "a.c")
	if err := os.WriteFile(src, []byte("#include <string.h>\n#include <stdlib.h>\nint f(char *d, const char *s) { return strlen(strcpy(d, s)) + abs(*d); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "a.so")
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plt := f.Section(".plt")
	if plt == nil || plt.Size < pltHeader+16 {
		t.Fatalf("no PLT with stubs in %s", so)
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	want := Rule{Kind: SPOffset, FP: FPSame, RA: RAInLR}
	for pc := plt.Addr + pltHeader; pc < plt.Addr+plt.Size; pc += 4 {
		if r, err := tab.RuleAt(pc); err != nil || r != want {
			t.Fatalf("RuleAt(%#x) in a stub = %+v, %v; want %+v", pc, r, err, want)
		}
	}
	for pc := plt.Addr; pc < plt.Addr+pltHeader; pc += 4 {
		if r, _ := tab.RuleAt(pc); r.Kind != Unknown {
			t.Fatalf("RuleAt(%#x) in the header = %+v, want none", pc, r)
		}
	}
	if host, err := elf.Open("/proc/self/exe"); err == nil {
		defer host.Close()
		if host.Machine == elf.EM_X86_64 && newPLTStubs(host) != nil {
			t.Fatal("an x86-64 binary got the aarch64 PLT rule")
		}
	}
}
