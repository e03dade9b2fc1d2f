package sampler

import (
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestVerifiedInstructionBudget loads every program with off-CPU
// sampling on, logs how many instructions the verifier processed for
// each and fails when one grew past its budget (bpf/verified-insns.txt):
// a change that makes the verifier walk many more paths shows here, on
// the host, and in the kernel matrix (test/kernels), before it reaches a
// kernel's limit.
func TestVerifiedInstructionBudget(t *testing.T) {
	testutil.RequireRoot(t)
	budget, err := testutil.ReadBudget(filepath.Join(testutil.RepoRoot(), "bpf", "verified-insns.txt"))
	if err != nil {
		t.Fatal(err)
	}
	counts, ok, err := MeasureVerifiedInstructions(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range switchPrograms {
		if _, loaded := counts[name]; !loaded && ok {
			t.Errorf("%s was not loaded by either sampler", name)
		}
	}
	if !ok {
		t.Skip("the kernel does not report verified instructions (Linux 5.16)")
	}
	ma, mi, _ := testutil.KernelRelease()
	held := false
	for k := range budget {
		held = held || strings.HasPrefix(k, runtime.GOARCH+"/")
	}
	names := slices.Sorted(maps.Keys(counts))
	for _, name := range names {
		n := counts[name]
		b, has := budget[runtime.GOARCH+"/"+name]
		t.Logf("kernel %d.%d %s: %s verified %d instructions (budget %d)", ma, mi, runtime.GOARCH, name, n, b)
		switch {
		case !held:
			// An architecture without budgets is logged only.
		case !has:
			t.Errorf("%s has no budget in bpf/verified-insns.txt: add it (its count on each kernel of the matrix, plus 20 %%)", name)
		case int64(n) > b:
			t.Errorf("%s: the verifier processed %d instructions, past its budget of %d (bpf/verified-insns.txt)", name, n, b)
		}
	}
}
