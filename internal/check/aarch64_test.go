package check

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAArch64Prologues checks real AArch64 builds of the fixture program:
// GCC and clang, with and without frame pointers, and with return
// addresses signed (paciasp, bti c before the frame record).
func TestAArch64Prologues(t *testing.T) {
	src := filepath.Join(fixtures, "src", "prog.c")
	fp := []string{"-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-Wl,--build-id=sha1"}
	nofp := []string{"-O2", "-fomit-frame-pointer", "-Wl,--build-id=sha1"}
	pac := append(slices.Clone(fp), "-mbranch-protection=standard")
	clang := []string{"clang-19", "--target=aarch64-linux-gnu", "-fuse-ld=bfd"}
	gcc := []string{"aarch64-linux-gnu-gcc"}
	tests := []struct {
		name          string
		cc            []string
		flags         []string
		missing, leaf []string
	}{
		// Unlike on x86-64, GCC 12 keeps the leaf's frame record with
		// -mno-omit-leaf-frame-pointer on AArch64.
		{name: "gcc", cc: gcc, flags: fp},
		{name: "gcc no frame pointer", cc: gcc, flags: nofp, missing: []string{"main", "work"}, leaf: []string{"leaf"}},
		{name: "gcc signed returns", cc: gcc, flags: pac},
		{name: "clang", cc: clang, flags: fp},
		{name: "clang no frame pointer", cc: clang, flags: nofp, missing: []string{"main", "work"}, leaf: []string{"leaf"}},
		{name: "clang signed returns", cc: clang, flags: pac},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := exec.LookPath(tt.cc[0]); err != nil {
				t.Skipf("no %s (gcc-aarch64-linux-gnu, clang-19 and libc6-dev-arm64-cross build the fixtures)", tt.cc[0])
			}
			out := filepath.Join(t.TempDir(), "prog")
			args := append(append(slices.Clone(tt.cc[1:]), tt.flags...), "-o", out, src)
			if b, err := exec.Command(tt.cc[0], args...).CombinedOutput(); err != nil {
				t.Fatalf("%s %v: %v\n%s", tt.cc[0], args, err, b)
			}
			info, err := analyzeELFFile(out, elfOptions{DebugRoot: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			st := info.FP
			if st.Checked < 3 {
				t.Fatalf("checked %d functions, want main, work and leaf at least", st.Checked)
			}
			if !slices.Equal(st.Missing, tt.missing) || !slices.Equal(st.Leaf, tt.leaf) {
				t.Errorf("missing = %v, leaf = %v; want %v, %v", st.Missing, st.Leaf, tt.missing, tt.leaf)
			}
			if !slices.Contains(st.Toolchain, "_start") {
				t.Errorf("toolchain list %v lacks _start", st.Toolchain)
			}
			res := run(t, &Checker{DebugRoot: t.TempDir()}, out)
			want := []string{}
			if len(tt.missing) > 0 {
				want = append(want, "frame-pointer-missing")
			}
			// Both compilers emit .eh_frame by default: the unwinder
			// recovers a leaf's caller, so the leaf is a note.
			if len(st.LeafNoCFI) > 0 {
				t.Errorf("leaves without an unwind rule: %v", st.LeafNoCFI)
			}
			if got := ruleSet(res.Findings, false); !slices.Equal(got, want) {
				t.Errorf("violations = %v, want %v", got, want)
			}
		})
	}
}

// TestAArch64GoBinary checks an arm64 Go build with cgo C code compiled
// without frame pointers: the C function is flagged, no Go function is
// prologue-checked.
func TestAArch64GoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a cgo program")
	}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err != nil {
		t.Skip("no aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")
	}
	out := filepath.Join(t.TempDir(), "gocgo")
	cmd := exec.Command("go", "build", "-o", out, "main.go")
	cmd.Dir = filepath.Join(fixtures, "gocgo")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOARCH=arm64", "CC=aarch64-linux-gnu-gcc",
		"CGO_CFLAGS=-O2 -fomit-frame-pointer")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	info, err := analyzeELFFile(out, elfOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Go || info.FP.GoFuncs < 1000 {
		t.Errorf("Go=%v GoFuncs=%d", info.Go, info.FP.GoFuncs)
	}
	if !slices.Contains(info.FP.Missing, "c_work") {
		t.Errorf("c_work not flagged; missing=%v leaf=%v", info.FP.Missing, info.FP.Leaf)
	}
	for _, name := range append(info.FP.Missing, info.FP.Leaf...) {
		if strings.Contains(name, ".") {
			t.Errorf("Go function %s was prologue-checked", name)
		}
	}
}

// TestAuthCall: the pointer-authenticating calls count as calls, their
// branch-only forms (braa) do not. Encodings from llvm-mc -mattr=+pauth.
func TestAuthCall(t *testing.T) {
	tests := []struct {
		name string
		w    uint32
		call bool
	}{
		{"blraa x1, x2", 0xd73f0822, true},
		{"blrab x1, x2", 0xd73f0c22, true},
		{"blraaz x3", 0xd63f087f, true},
		{"braa x1, x2", 0xd71f0822, false},
		{"blr x1", 0xd63f0020, false}, // decoded as BLR instead
	}
	for _, tt := range tests {
		if got := isAuthCall(tt.w); got != tt.call {
			t.Errorf("isAuthCall(%s) = %v, want %v", tt.name, got, tt.call)
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], tt.w)
		if _, call := scanAArch64(b[:]); call != (tt.call || tt.name == "blr x1") {
			t.Errorf("scanAArch64(%s) call = %v", tt.name, call)
		}
	}
}
