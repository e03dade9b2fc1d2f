package unwind

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

var fixtures = filepath.Join("..", "..", "testdata", "symbolize", "build")

func TestMain(m *testing.M) {
	testutil.MustBuildFixtures("symbolize")
	os.Exit(m.Run())
}

func fixture(name string) string { return filepath.Join(fixtures, name) }

// nmSymbols is the ground truth for function addresses.
func nmSymbols(t testing.TB, path string, dynamic bool) map[string]uint64 {
	t.Helper()
	args := []string{"--defined-only", path}
	if dynamic {
		args = append([]string{"-D"}, args...)
	}
	out, err := exec.Command("nm", args...).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", path, err)
	}
	syms := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		syms[strings.SplitN(f[2], "@", 2)[0]] = a
	}
	return syms
}

// readelfRow is one row of readelf --debug-dump=frames-interp: the CFA
// in rule, and where the caller's rbp is and whether the return address
// is undefined in full.
type readelfRow struct {
	section string
	pc      uint64
	rule    Rule
	full    Rule
	expr    bool // the CFA is a DWARF expression ("exp")
}

// readelfRules is the ground truth for CFA rules.
func readelfRules(t testing.TB, path string) []readelfRow {
	t.Helper()
	// readelf exits 1 on libc without saying why; only its output counts.
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var rows []readelfRow
	section := ""
	inFDE := false
	var cols []string // the columns of the FDE's table, from its LOC line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "Contents of the "); ok {
			section, _, _ = strings.Cut(s, " ")
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 4 && f[3] == "FDE" {
			inFDE = true
			continue
		}
		if len(f) >= 4 && f[3] == "CIE" || len(f) == 0 {
			inFDE = false
			continue
		}
		if !inFDE || len(f) < 2 {
			continue
		}
		if f[0] == "LOC" {
			cols = f
			continue
		}
		pc, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		// A register rule reads "r10 (r10)": one column.
		f = slices.DeleteFunc(f, func(v string) bool { return strings.HasPrefix(v, "(") })
		cfa := parseReadelfCFA(f[1])
		full := cfa
		for i := 2; i < len(f) && i < len(cols); i++ {
			switch v := f[i]; cols[i] {
			case "rbp":
				// u: no rule, which for a callee-saved register is the
				// caller's value; s: same_value.
				switch {
				case v == "u" || v == "s":
				case strings.HasPrefix(v, "c"):
					n, err := strconv.ParseInt(v[1:], 10, 64)
					if err != nil {
						t.Fatalf("readelf rbp column %q", v)
					}
					full.FP, full.FPOffset = FPAtCFA, n
				default:
					full.FP = FPLost
				}
			case "ra":
				full.Outermost = v == "u"
			}
		}
		rows = append(rows, readelfRow{section: section, pc: pc, rule: cfa, full: full, expr: f[1] == "exp"})
	}
	return rows
}

func parseReadelfCFA(s string) Rule {
	for prefix, kind := range map[string]Kind{"rsp+": SPOffset, "rbp+": FPOffset} {
		if v, ok := strings.CutPrefix(s, prefix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return Rule{Kind: kind, Offset: n}
			}
		}
	}
	return Rule{}
}
