package gowait

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

var (
	cgoOnce sync.Once
	cgoErr  error
)

// cgoFixture builds testdata/gowait/cgo (a cgo binary linked with glibc)
// once per test binary.
func cgoFixture(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../testdata/gowait/cgo")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "..", "build", "cgo")
	cgoOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			cgoErr = err
			t.Logf("%s", out)
		}
	})
	if cgoErr != nil {
		t.Fatalf("build cgo fixture: %v", cgoErr)
	}
	return bin
}

// TestCgoCallback samples a goroutine parked inside a Go callback that C
// code (glibc's qsort, without frame pointers) called.
func TestCgoCallback(t *testing.T) {
	requirePtrace(t)
	cmd := exec.Command(cgoFixture(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("fixture first line %q: %v", line, err)
	}
	s := New(Options{})
	if err := s.Add(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	// The sampler's own symbolization is not the ground truth: name the
	// raw addresses from the fixture's ELF symbol table.
	var stack []string
	for try := 0; try < 50 && stack == nil; try++ {
		s.SampleOnce(time.Now())
		for _, smp := range symbolized(t, s, take(s)) {
			fs := symNames(t, cmd.Path, smp.Frames)
			if slices.Contains(fs, "main.parkedInCallback") {
				stack = fs
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Stats()
	t.Logf("stack %q", stack)
	t.Logf("stats %+v", st)
	for _, want := range []string{"main.parkedInCallback", "runtime.cgocallback.abi0", "crosscall2", "qsort_r", "sortWithCallback", "runtime.asmcgocall.abi0"} {
		if !slices.Contains(stack, want) {
			t.Errorf("stack lacks %s", want)
		}
	}
	if st.NativeCallbacks == 0 || st.NativeFrames == 0 {
		t.Errorf("no native walk counted: %+v", st)
	}
}

// symNames names each frame by the ELF symbol containing it (a return
// address, after the first, by its call instruction).
func symNames(t *testing.T, bin string, frames []profile.Frame) []string {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	libc := map[string]bool{"qsort_r": true}
	var out []string
	for i, fr := range frames {
		pc := fr.Address
		if i > 0 {
			pc--
		}
		name := ""
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && pc >= s.Value && pc < s.Value+s.Size {
				name = s.Name
			}
		}
		if name == "" && fr.Mapping != nil && strings.Contains(fr.Mapping.Path, "libc.so") && libc[fr.Function] {
			name = fr.Function // glibc's own symbol, from its .symtab-less dynsym
		}
		out = append(out, name)
	}
	return out
}
