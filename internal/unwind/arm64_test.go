package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"slices"
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
	if entry != (Rule{Kind: SPOffset, Offset: 0, RA: RAInLR}) {
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
	if body.Kind != SPOffset || body.Offset <= 0 || body.RA != RAAtCFA || body.RAOffset != 8-body.Offset {
		t.Fatalf("rule after the stp = %+v, want sp+N with N > 0 and x30 at CFA-N+8", body)
	}
	if _, ok := RecoverCallerLR(body, 0x1234); ok {
		t.Fatalf("RecoverCallerLR trusted the link register at %v", body)
	}
}

// TestWalkArm64 unwinds made-up arm64 stacks: a leaf whose caller is in
// the link register, a frameless library function that saved x30 (signed
// by pointer authentication) in its frame, and frame records laid out as
// gcc lays them (at the bottom of the frame) under it, which the kernel's
// chain holds.
func TestWalkArm64(t *testing.T) {
	const (
		fnStart = 0x1000 // outermost
		fnMain  = 0x2000 // gcc frame record: CFA = x29+32, {x29, x30} at x29
		fnLib   = 0x3000 // frameless, CFA = sp+32, x30 at CFA-8
		fnLeaf  = 0x4000 // a leaf: CFA = sp+0, the return address in x30
		pac     = 0x007f000000000000
	)
	code := fakeCode{
		{fnStart, fnStart + 0x100, Rule{Kind: SPOffset, Offset: 16, RA: RALost, Outermost: true}},
		{fnMain, fnMain + 0x100, Rule{Kind: FPOffset, Offset: 32, FP: FPAtCFA, FPOffset: -32, RA: RAAtCFA, RAOffset: -24}},
		{fnLib, fnLib + 0x100, Rule{Kind: SPOffset, Offset: 32, RA: RAAtCFA, RAOffset: -8}},
		{fnLeaf, fnLeaf + 0x100, Rule{Kind: SPOffset, Offset: 0, RA: RAInLR}},
	}
	const sp0 = 0x7ff0000
	words := map[uint64]uint64{
		sp0 + 24: ret(fnMain) | pac, // fnLib's saved x30
		sp0 + 32: 0,                 // fnMain's record: the caller's x29 (the chain ends)
		sp0 + 40: ret(fnStart) | pac,
	}
	window := make([]byte, 256)
	for a, v := range words {
		binary.LittleEndian.PutUint64(window[a-sp0:], v)
	}
	chain := []uint64{fnLeaf + 0x20, ret(fnStart)} // the kernel's, stripped
	for _, tc := range []struct {
		name   string
		ip, lr uint64
		mask   uint64
		want   []uint64
		stop   Stop
	}{
		{"leaf", fnLeaf + 0x20, ret(fnLib), pac, []uint64{fnLeaf + 0x20, ret(fnLib), ret(fnMain), ret(fnStart)}, StopOutermost},
		// The same stack sampled in fnLib, which stored x30 already: the
		// link register holds whatever fnLib last called returned to.
		{"frameless", fnLib + 0x20, 0xdead, pac, []uint64{fnLib + 0x20, ret(fnMain), ret(fnStart)}, StopOutermost},
		// Without the mask the signed word is no code with a rule: the
		// walk goes on by the kernel's chain, as for code without tables,
		// and the frame stays signed (no function of the profile).
		{"no mask", fnLib + 0x20, 0xdead, 0, []uint64{fnLib + 0x20, ret(fnMain) | pac, ret(fnStart)}, StopOutermost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := slices.Clone(chain)
			c[0] = tc.ip
			s := Stack{IP: tc.ip, SP: sp0, FP: sp0 + 32, LR: tc.lr, LinkRegister: true, PACMask: tc.mask, Window: window, Chain: c}
			got, res := Walk(s, code.lookup, nil, 64)
			if !slices.Equal(got, tc.want) || res.Stop != tc.stop {
				t.Fatalf("Walk = %#x (%v), want %#x (%v)", got, res.Stop, tc.want, tc.stop)
			}
		})
	}
	// A frame other than the sampled one whose rule says x30 holds its
	// return address cannot be unwound: the register was overwritten by
	// the call it made.
	s := Stack{IP: fnLib + 0x20, SP: sp0, FP: sp0 + 32, LR: 0xdead, LinkRegister: true, Window: window, Chain: []uint64{fnLib + 0x20}}
	lookup := func(pc uint64) Rule {
		if pc >= fnMain && pc < fnMain+0x100 {
			return Rule{Kind: SPOffset, Offset: 16, RA: RAInLR}
		}
		return code.lookup(pc)
	}
	words[sp0+24] = ret(fnMain)
	binary.LittleEndian.PutUint64(window[24:], ret(fnMain))
	if got, res := Walk(s, lookup, nil, 64); res.Stop != StopBadRule || len(got) != 2 {
		t.Fatalf("Walk = %#x (%v), want two frames and %v", got, res.Stop, StopBadRule)
	}
}
