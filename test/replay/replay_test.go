package replay

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "record the cases again with the real sampler (root) and write testdata/replay")

// TestReplay replays every case of testdata/replay through the pipeline
// on a fake source, without root, and compares the folded stacks with
// the case's expected.folded. With -update it first records the case
// again (record_test.go).
func TestReplay(t *testing.T) {
	for _, r := range recordings {
		t.Run(r.name, func(t *testing.T) {
			if *update {
				record(t, r)
			}
			dir := filepath.Join(corpusDir(), r.name)
			c, events, err := readCase(dir)
			if err != nil {
				t.Fatalf("case %s: %v (record it: sudo go test ./test/replay -update -run 'TestReplay/%s')", r.name, err, r.name)
			}
			want, err := os.ReadFile(filepath.Join(dir, "expected.folded"))
			if err != nil {
				t.Fatal(err)
			}
			got := replay(t, c, events, procRoot(t, dir, c), filepath.Join(dir, "kallsyms"))
			if got != string(want) {
				t.Errorf("case %s (%s): the replay's folded stacks differ from expected.folded (-want +got):\n%s", r.name, c.Stack, diffFolded(string(want), got))
			}
		})
	}
}

// TestCasesCover checks that the corpus has a case of every runtime and
// that each case's stacks are the fixture's: the expected stacks of a
// case must hold its known call paths, for CPython through the perf
// trampolines and C frames without frame pointers to the thread's start.
func TestCasesCover(t *testing.T) {
	want := map[string][]string{
		"c":      {";main;level1;level2;level3;level4;level5"},
		"go":     {";main.main;main.spinOuter;main.spinInner"},
		"jvm":    {";JavaCalls::call_helper(", ";long Hot.work(long)"},
		"python": {";py::worker:", ";py::hot_loop:", ";py::inner:", ";py::main_loop:", ";Py_RunMain;", ";pythread_wrapper;"},
	}
	for name, funcs := range want {
		b, err := os.ReadFile(filepath.Join(corpusDir(), name, "expected.folded"))
		if err != nil {
			t.Errorf("case %s: %v", name, err)
			continue
		}
		for _, fn := range funcs {
			if !strings.Contains(string(b), fn) {
				t.Errorf("case %s: no expected stack runs through %s", name, fn)
			}
		}
	}
}

// TestObjectsUsed checks that testdata/replay/objects holds the objects
// the cases name and no other.
func TestObjectsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, r := range recordings {
		c, _, err := readCase(filepath.Join(corpusDir(), r.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Processes {
			for _, o := range p.Objects {
				used[o.File] = true
				if _, err := os.Stat(filepath.Join(corpusDir(), o.File)); err != nil {
					t.Errorf("case %s: %v", r.name, err)
				}
			}
		}
	}
	all, _ := filepath.Glob(filepath.Join(corpusDir(), "objects", "*"))
	for _, p := range all {
		if !used[filepath.Join("objects", filepath.Base(p))] {
			t.Errorf("%s: no case uses it", p)
		}
	}
}

// diffFolded lists the stacks whose counts differ, the largest first.
func diffFolded(want, got string) string {
	w, g := parseFolded(want), parseFolded(got)
	type d struct {
		stack     string
		want, got int64
	}
	var ds []d
	for s, n := range w {
		if g[s] != n {
			ds = append(ds, d{s, n, g[s]})
		}
	}
	for s, n := range g {
		if _, ok := w[s]; !ok {
			ds = append(ds, d{s, 0, n})
		}
	}
	slices.SortFunc(ds, func(a, b d) int { return int(max(b.want, b.got) - max(a.want, a.got)) })
	var sb strings.Builder
	for i, x := range ds {
		if i == 20 {
			fmt.Fprintf(&sb, "... and %d more\n", len(ds)-i)
			break
		}
		fmt.Fprintf(&sb, "-%d +%d %s\n", x.want, x.got, x.stack)
	}
	return sb.String()
}
