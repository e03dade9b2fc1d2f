package tracectx

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/spanprof/spanprof/internal/elfmutate"
)

// TestReliabilityMutatedELF runs the readers over deterministic
// corruptions of the FuzzFindThreadContext seeds: no panic, no unbounded allocation.
func TestReliabilityMutatedELF(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	for _, seed := range corpusSeeds(t, "FuzzFindThreadContext") {
		for _, data := range elfmutate.Mutations(seed, n) {
			ef, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				continue
			}
			_, _ = findHook(ef, "m")
			if v, err := findThreadContext(ef, "m"); err == nil {
				mem := memAt{data: data}
				if l, err := Resolve(mem, v, 0, true); err == nil {
					_, _, _ = ReadThreadContext(mem, 0x1000, l)
				}
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
