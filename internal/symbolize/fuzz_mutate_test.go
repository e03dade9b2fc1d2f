package symbolize

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/spanprof/spanprof/internal/elfmutate"
	"github.com/spanprof/spanprof/internal/gopclntab"
)

// TestReliabilityMutatedELF runs the readers over deterministic
// corruptions of the FuzzSymbolizeELF seeds: no panic, no unbounded allocation.
func TestReliabilityMutatedELF(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	for _, seed := range corpusSeeds(t, "FuzzSymbolizeELF") {
		for _, data := range elfmutate.Mutations(seed, n) {
			ef, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				continue
			}
			if p, err := gopclntab.Find(ef); err == nil {
				_, _ = newGoTable(p)
			}
			st := newSymtab(ef)
			for _, s := range ef.Sections {
				st.lookup(s.Addr)
			}
			_ = BuildID(ef)
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
