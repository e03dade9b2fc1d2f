package unwind

import (
	"debug/elf"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// readelfFDEs is the ground truth: the pc ranges readelf prints for the
// FDEs of path's .eh_frame and .debug_frame.
func readelfFDEs(t *testing.T, path string) []FuncRange {
	t.Helper()
	out, err := exec.Command("readelf", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	re := regexp.MustCompile(`FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	var rs []FuncRange
	for _, m := range re.FindAllSubmatch(out, -1) {
		s, _ := strconv.ParseUint(string(m[1]), 16, 64)
		e, _ := strconv.ParseUint(string(m[2]), 16, 64)
		if e > s {
			rs = append(rs, FuncRange{s, e})
		}
	}
	slices.SortFunc(rs, func(a, b FuncRange) int {
		if a.Start != b.Start {
			return int(a.Start) - int(b.Start)
		}
		return int(a.End) - int(b.End)
	})
	return slices.Compact(rs)
}

// TestFunctionRanges checks the FDE ranges of a stripped system binary
// and of a fixture against readelf's, and that FunctionAt finds the range
// of an address inside each.
func TestFunctionRanges(t *testing.T) {
	for _, path := range []string{"/usr/bin/gzip", fixture("chain-gcc"), fixture("chain-gcc-debugframe")} {
		t.Run(path, func(t *testing.T) {
			f, err := elf.Open(path)
			if err != nil {
				t.Skipf("no %s: %v", path, err)
			}
			defer f.Close()
			want := readelfFDEs(t, path)
			if len(want) == 0 {
				t.Fatalf("readelf lists no FDEs in %s", path)
			}
			got, err := FunctionRanges(f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("FunctionRanges: %d ranges, readelf %d; first got %v want %v", len(got), len(want), got[:min(3, len(got))], want[:3])
			}
			tab, err := NewTable(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range want {
				for _, pc := range []uint64{r.Start, (r.Start + r.End) / 2, r.End - 1} {
					if g, ok := tab.FunctionAt(pc); !ok || g != r {
						t.Errorf("FunctionAt(%#x) = %v, %v; want %v", pc, g, ok, r)
					}
				}
			}
			// Below the first FDE there is no function to name.
			if g, ok := tab.FunctionAt(want[0].Start - 1); ok && g.Start > want[0].Start-1 {
				t.Errorf("FunctionAt(%#x) = %v outside it", want[0].Start-1, g)
			}
		})
	}
}
