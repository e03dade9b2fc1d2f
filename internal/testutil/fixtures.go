package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// built keeps each build's result, by directory and targets: a test
// binary builds a directory once, however many tests ask for it.
var built sync.Map // string → *build

type build struct {
	once sync.Once
	err  error
}

// BuildFixtures runs make in testdata/dir (with targets, or its default
// one) once per test binary, and returns the directory's absolute path.
func BuildFixtures(dir string, targets ...string) (string, error) {
	return Make(filepath.Join("testdata", dir), targets...)
}

// Make runs make with targets in dir, a directory of the repository
// ("." for the top Makefile's targets), once per test binary, and returns
// the directory's absolute path. Test binaries of several packages may
// build the same directory at the same time (go test runs packages in
// parallel): make runs under an exclusive lock on dir/.fixtures.lock, so
// one builds and the others then find everything up to date.
func Make(dir string, targets ...string) (string, error) {
	abs := filepath.Join(RepoRoot(), dir)
	key := abs + "\x00" + strings.Join(targets, "\x00")
	v, _ := built.LoadOrStore(key, &build{})
	b := v.(*build)
	b.once.Do(func() { b.err = runMake(abs, targets) })
	return abs, b.err
}

func runMake(dir string, targets []string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".fixtures.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("build fixtures in %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("build fixtures in %s: lock: %w", dir, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	args := append([]string{"-s", "-C", dir}, targets...)
	if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("make %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// MissingTool returns "X not installed" for the first of tools not on
// PATH, "" when all are.
func MissingTool(tools ...string) string {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not installed"
		}
	}
	return ""
}

// Fixtures builds testdata/dir (BuildFixtures) for t and returns the
// directory: t skips when one of tools is missing, and fails when make
// fails.
func Fixtures(t testing.TB, dir string, tools []string, targets ...string) string {
	t.Helper()
	if m := MissingTool(append([]string{"make"}, tools...)...); m != "" {
		t.Skipf("fixtures of testdata/%s not built: %s", dir, m)
	}
	abs, err := BuildFixtures(dir, targets...)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// MustBuildFixtures is BuildFixtures for a TestMain: it exits the test
// binary with the error when make fails.
func MustBuildFixtures(dir string, targets ...string) string {
	abs, err := BuildFixtures(dir, targets...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return abs
}
