package unwind

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAArch64Rules reads the CFA rules of an aarch64 gcc build of the chain
// fixture: at a function's first instruction nothing is stored (CFA = sp+0)
// and the caller is the link register; once `stp x29, x30, [sp, #-N]!` has
// run, CFA = sp+N and the link register is not trusted.
func TestAArch64Rules(t *testing.T) {
	gcc, err := exec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skip("no aarch64-linux-gnu-gcc (Debian package gcc-aarch64-linux-gnu)")
	}
	bin := filepath.Join(t.TempDir(), "chain-a64")
	out, err := exec.Command(gcc, "-O2", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
		"-o", bin, "../../testdata/fixtures/chain.c").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var level5 uint64
	for _, s := range syms {
		if s.Name == "level5" {
			level5 = s.Value
		}
	}
	if level5 == 0 {
		t.Fatal("no level5 in the fixture")
	}
	tab, err := NewTable(f)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := tab.RuleAt(level5)
	if err != nil {
		t.Fatal(err)
	}
	if entry != (Rule{Kind: SPOffset, Offset: 0}) {
		t.Fatalf("rule at level5's entry = %v, want sp+0", entry)
	}
	if ra, ok := RecoverCallerLR(entry, 0x1234); !ok || ra != 0x1234 {
		t.Fatalf("RecoverCallerLR at entry = %#x, %v; want the link register", ra, ok)
	}
	// The instruction after the frame record's store.
	body, err := tab.RuleAt(level5 + 4)
	if err != nil {
		t.Fatal(err)
	}
	if body.Kind != SPOffset || body.Offset <= 0 {
		t.Fatalf("rule after the stp = %v, want sp+N with N > 0", body)
	}
	if _, ok := RecoverCallerLR(body, 0x1234); ok {
		t.Fatalf("RecoverCallerLR trusted the link register at %v", body)
	}
}
