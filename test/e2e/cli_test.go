package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestRecordErrors checks that bad input gets one clear line on stderr and
// exit code 1, before anything is loaded.
func TestRecordErrors(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad flag", []string{"record", "--bogus"}, "flag provided but not defined"},
		{"unknown extension", []string{"record", "--output", "x.txt"}, "x.txt"},
		{"pid gone", []string{"record", "--pid", "999999999"}, "process 999999999 does not exist"},
		{"bad pid", []string{"record", "--pid", "abc"}, "not a process id"},
		{"bad frequency", []string{"record", "--frequency", "0"}, "out of range"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(binPath, tt.args...).CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit = %v, want code 1; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Fatalf("output %q does not mention %q", out, tt.want)
			}
		})
	}
}

func TestRecordNotRoot(t *testing.T) {
	testutil.RequireRoot(t)
	// t.TempDir's parent is private; nobody must be able to reach the copy.
	dir, err := os.MkdirTemp("/tmp", "spanprof-nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "spanprof")
	b, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "record", "--duration", "1s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want 1; output:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "needs root or CAP_BPF+CAP_PERFMON") {
		t.Fatalf("want one line naming the privileges, got:\n%s", out)
	}
}

// TestCheckOwnRepository runs `spanprof check` over this repository's build
// files, its clang-built demo binaries and spanprof as `make build` makes
// it (without cgo): the project keeps its own rules. A cgo build links
// libcap's psx C code, which cgo compiles with its default flags and so
// without frame pointers; docs/reliability.md says so.
func TestCheckOwnRepository(t *testing.T) {
	testutil.RequireRoot(t)
	shipped := filepath.Join(t.TempDir(), "spanprof")
	build := exec.Command("go", "build", "-o", shipped, filepath.Join(repoRoot, "cmd", "spanprof"))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build spanprof without cgo: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"check", repoRoot},
		{"check", filepath.Join(repoRoot, "testdata", "tracectx", "build", "workload-clang"),
			filepath.Join(fixtures, "chain-clang"), filepath.Join(fixtures, "gofix"), shipped},
	} {
		out, err := exec.Command(binPath, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("spanprof %v: %v\n%s", args, err, out)
		}
	}
}
