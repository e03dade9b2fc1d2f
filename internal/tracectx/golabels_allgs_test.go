package tracectx

import (
	"errors"
	"slices"
	"testing"
)

// TestGoAllGTableMatchesDWARF checks, for every covered Go release, that
// the g layout table (for binaries without DWARF) and the wait-reason
// table (for binaries without symbols) give what the binary itself says,
// and that a -w build (symbols, no DWARF) resolves through the table.
func TestGoAllGTableMatchesDWARF(t *testing.T) {
	for _, tc := range goFixtureToolchains {
		t.Run(tc, func(t *testing.T) {
			full, err := GoAllGOffsets(buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "labels"}))
			if err != nil {
				t.Fatalf("GoAllGOffsets: %v", err)
			}
			if full.GSource != "dwarf" || full.ReasonSource != "symtab" {
				t.Fatalf("unstripped build: g from %q, reasons from %q; want dwarf, symtab", full.GSource, full.ReasonSource)
			}
			table, err := goGLayoutFromTable(full.GoVersion)
			if err != nil {
				t.Fatal(err)
			}
			if table != full.G {
				t.Errorf("g table != dwarf:\n table %#v\n dwarf %#v", table, full.G)
			}
			reasons, err := goWaitReasonsFromTable(full.GoVersion)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(reasons, full.WaitReasons) {
				t.Errorf("wait-reason table != binary:\n table  %q\n binary %q", reasons, full.WaitReasons)
			}
			if full.Labels == nil {
				t.Errorf("no label layout")
			}
			if full.AllGLen == 0 || full.AllGPtr == 0 || full.PIE {
				t.Errorf("allglen %#x allgptr %#x pie %v", full.AllGLen, full.AllGPtr, full.PIE)
			}
			_, err = GoAllGOffsets(buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "labels", stripped: true}))
			if !errors.Is(err, ErrNoAllGSymbols) {
				t.Errorf("stripped build: %v, want ErrNoAllGSymbols", err)
			}
		})
	}
}
