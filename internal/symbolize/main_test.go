package symbolize

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// fixtures is where testdata/symbolize/Makefile puts its binaries.
var fixtures = filepath.Join("..", "..", "testdata", "symbolize", "build")

func TestMain(m *testing.M) {
	testutil.MustBuildFixtures("symbolize")
	os.Exit(m.Run())
}

func fixture(name string) string { return filepath.Join(fixtures, name) }

// nmSymbols is the ground truth: name → address from binutils nm.
func nmSymbols(t testing.TB, path string) map[string]uint64 {
	return runNM(t, "--defined-only", path)
}

// nmSymbolsDyn reads the dynamic symbols (nm -D), without @VERSION.
func nmSymbolsDyn(t testing.TB, path string) map[string]uint64 {
	return runNM(t, "-D", "--defined-only", path)
}

func runNM(t testing.TB, args ...string) map[string]uint64 {
	t.Helper()
	path := args[len(args)-1]
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
			t.Fatalf("nm line %q: %v", sc.Text(), err)
		}
		name, _, _ := strings.Cut(f[2], "@")
		syms[name] = a
	}
	return syms
}

// readelfBuildID is the ground truth for BuildID.
func readelfBuildID(t testing.TB, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if _, id, ok := strings.Cut(l, "Build ID: "); ok {
			return strings.TrimSpace(id)
		}
	}
	return ""
}
