package bpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHeadersCompileAlone compiles each header on its own, for each
// architecture bpf2go builds, so that a program or a test may include any
// of them first: a header includes what it uses and depends on no other
// header having come before it.
func TestHeadersCompileAlone(t *testing.T) {
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		t.Skip("no clang-19 (make deps installs it)")
	}
	headers, err := filepath.Glob("lib/*.h")
	if err != nil {
		t.Fatal(err)
	}
	headers = append(headers, "arch.h", "spanprof.h", "shared.h")
	dir := t.TempDir()
	for _, arch := range []string{"x86", "arm64"} {
		for _, h := range headers {
			t.Run(arch+"/"+h, func(t *testing.T) {
				src := filepath.Join(dir, "alone.c")
				if err := os.WriteFile(src, []byte("#include \""+h+"\"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				// -Wno-unused-function: a header's static helpers are
				// unused until a program calls them.
				cmd := exec.Command(clang, "-target", "bpf", "-D__TARGET_ARCH_"+arch,
					"-O2", "-Wall", "-Werror", "-Wno-unused-function", "-I.", "-fsyntax-only", src)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s does not compile alone for %s: %v\n%s", h, arch, err, out)
				}
			})
		}
	}
}
