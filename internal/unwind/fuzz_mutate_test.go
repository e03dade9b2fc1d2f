package unwind

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/spanprof/spanprof/internal/elfmutate"
)

// TestReliabilityMutatedELF runs the readers over deterministic
// corruptions of the FuzzUnwindTable seeds: no panic, no unbounded allocation.
func TestReliabilityMutatedELF(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	for _, seed := range corpusSeeds(t, "FuzzUnwindTable") {
		for _, data := range elfmutate.Mutations(seed, n) {
			ef, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				continue
			}
			tab, err := NewTable(ef)
			if err != nil {
				continue
			}
			for _, s := range ef.Sections {
				_, _ = tab.RuleAt(s.Addr + s.Size/2)
			}
		}
	}
}

// corpusSeeds reads the []byte seeds of a fuzz target's corpus.
func corpusSeeds(t *testing.T, target string) [][]byte {
	t.Helper()
	seeds, err := elfmutate.CorpusSeeds(".", target)
	if err != nil {
		t.Fatal(err)
	}
	return seeds
}
