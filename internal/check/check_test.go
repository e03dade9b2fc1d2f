package check

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

const fixtures = "../../testdata/check"

// fixtureErr is why the ELF fixtures could not be built; tests that need
// them skip when a compiler is missing and fail when make failed.
var fixtureErr error

func TestMain(m *testing.M) {
	if m := testutil.MissingTool("gcc", "clang-19", "make", "strip", "objcopy"); m != "" {
		fixtureErr = fmt.Errorf("skip: %s", m)
	} else if _, err := testutil.BuildFixtures("check"); err != nil {
		fixtureErr = err
	}
	os.Exit(m.Run())
}

func needFixtures(t testing.TB) {
	t.Helper()
	if fixtureErr == nil {
		return
	}
	if strings.HasPrefix(fixtureErr.Error(), "skip:") {
		t.Skip(fixtureErr)
	}
	t.Fatal(fixtureErr)
}

func bin(name string) string { return filepath.Join(fixtures, "bin", name) }

// ruleSet lists the distinct rule ids of findings, sorted.
func ruleSet(fs []Finding, withNotes bool) []string {
	set := map[string]bool{}
	for _, f := range fs {
		if withNotes || f.violation() {
			set[f.Rule] = true
		}
	}
	out := []string{}
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

func run(t *testing.T, c *Checker, args ...string) *Result {
	t.Helper()
	res, err := c.Run(args)
	if err != nil {
		t.Fatalf("Run(%v): %v", args, err)
	}
	return res
}

func TestELFRules(t *testing.T) {
	needFixtures(t)
	tests := []struct {
		name string
		file string
		want []string // violations only
		// functions named in the frame-pointer findings
		missing, leaf []string
	}{
		{name: "clang good", file: "clang-good", want: []string{}},
		// GCC 12 with the recommended flags: the leaf's caller is recovered
		// from .eh_frame, so the leaf is a note, not a violation.
		{name: "gcc leaf problem", file: "gcc-fp", want: []string{}, leaf: []string{"leaf"}},
		{name: "gcc leaf without unwind tables", file: "gcc-fp-nocfi", want: []string{"leaf-frame-pointer"}, leaf: []string{"leaf"}},
		{name: "gcc omit frame pointer", file: "gcc-nofp", want: []string{"frame-pointer-missing"},
			missing: []string{"main", "work"}, leaf: []string{"leaf"}},
		{name: "no build id", file: "clang-noid", want: []string{"build-id-missing"}},
		{name: "md5 build id", file: "clang-md5", want: []string{"build-id-not-sha1"}},
		{name: "stripped", file: "clang-stripped", want: []string{"stripped-no-debuglink"}},
		{name: "stripped with debuglink", file: "clang-debuglink", want: []string{}},
		{name: "exports context", file: "clang-ctx", want: []string{}},
		{name: "context not exported", file: "clang-ctx-hidden", want: []string{"thread-ctx-not-exported"}},
		{name: "shared library", file: "libgood.so", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, &Checker{DebugRoot: t.TempDir()}, bin(tt.file))
			if got := ruleSet(res.Findings, false); !slices.Equal(got, tt.want) {
				t.Errorf("violations = %v, want %v\n%v", got, tt.want, res.Findings)
			}
			for _, f := range res.Findings {
				switch f.Rule {
				case "frame-pointer-missing":
					if !slices.Equal(f.Functions, tt.missing) {
						t.Errorf("missing = %v, want %v", f.Functions, tt.missing)
					}
				case "leaf-frame-pointer":
					if !slices.Equal(f.Functions, tt.leaf) {
						t.Errorf("leaf = %v, want %v", f.Functions, tt.leaf)
					}
				case "toolchain-functions":
					// Without symbols the entry point's FDE stands for _start.
					entry := "_start"
					if ef, err := elf.Open(bin(tt.file)); err == nil {
						entry = fdeName(ef, tt.file, ef.Entry)
						ef.Close()
					}
					if !slices.Contains(f.Functions, "_start") && !slices.Contains(f.Functions, entry) && !strings.HasSuffix(tt.file, ".so") {
						t.Errorf("toolchain list %v lacks _start (%s)", f.Functions, entry)
					}
				}
			}
		})
	}
}

func TestELFInfo(t *testing.T) {
	needFixtures(t)
	tests := []struct {
		file              string
		pie, shared, strp bool
		threadCtx         string
		setFn             bool
		idLen             int
	}{
		{file: "clang-good", pie: true, idLen: 20},
		{file: "libgood.so", shared: true, idLen: 20},
		{file: "clang-md5", pie: true, idLen: 16},
		{file: "clang-stripped", pie: true, strp: true, idLen: 20},
		{file: "clang-ctx", pie: true, threadCtx: "ok", setFn: true, idLen: 20},
		{file: "clang-ctx-hidden", pie: true, threadCtx: "otel_thread_ctx_v1 is defined but not exported in .dynsym", setFn: true, idLen: 20},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			info, err := analyzeELFFile(bin(tt.file), elfOptions{DebugRoot: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if info.PIE != tt.pie || info.SharedLib != tt.shared || info.Stripped != tt.strp ||
				info.ThreadCtx != tt.threadCtx || info.SetTraceCtxFn != tt.setFn || len(info.BuildID) != tt.idLen {
				t.Errorf("got pie=%v shared=%v stripped=%v ctx=%q setFn=%v idlen=%d",
					info.PIE, info.SharedLib, info.Stripped, info.ThreadCtx, info.SetTraceCtxFn, len(info.BuildID))
			}
		})
	}
}

// The build-ID debug tree lets a stripped binary be checked in full.
func TestBuildIDDebugFile(t *testing.T) {
	needFixtures(t)
	info, err := analyzeELFFile(bin("clang-good"), elfOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	h := fmt.Sprintf("%x", info.BuildID)
	dir := filepath.Join(root, ".build-id", h[:2])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// clang-good and clang-stripped are the same build, so the unstripped
	// file serves as the debug file.
	data, err := os.ReadFile(bin("clang-good"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, h[2:]+".debug"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, &Checker{DebugRoot: root}, bin("clang-stripped"))
	if got := ruleSet(res.Findings, false); len(got) != 0 {
		t.Errorf("violations = %v, want none", got)
	}
	s, err := analyzeELFFile(bin("clang-stripped"), elfOptions{DebugRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if s.FP.Checked != info.FP.Checked || s.FP.Checked == 0 {
		t.Errorf("checked %d functions via debug file, want %d", s.FP.Checked, info.FP.Checked)
	}
}

// The test binary is a Go program: Go functions must not be prologue
// checked, and no C rule may fire on the Go runtime's assembly.
func TestGoBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := analyzeELFFile(exe, elfOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Go || info.FP.GoFuncs < 1000 {
		t.Fatalf("Go=%v GoFuncs=%d, want a Go binary with its functions", info.Go, info.FP.GoFuncs)
	}
	if len(info.FP.Missing) > 0 {
		t.Errorf("Go binary flagged: %v", info.FP.Missing)
	}
}

func TestMainExitCodes(t *testing.T) {
	needFixtures(t)
	emptyDir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		want     int
		stderr   string
		stdoutRe string
	}{
		{name: "clang good passes", args: []string{bin("clang-good")}, want: 0, stdoutRe: "0 errors, 0 warnings"},
		{name: "gcc recommended build passes", args: []string{bin("gcc-fp")}, want: 0, stdoutRe: "note    leaf-frame-pointer: 1 leaf function (no call instruction) set up no frame pointer; the unwinder recovers the caller"},
		{name: "gcc leaf without unwind tables fails", args: []string{bin("gcc-fp-nocfi")}, want: 1, stdoutRe: "warning leaf-frame-pointer"},
		{name: "gcc leaf ignored", args: []string{"--ignore", "leaf-frame-pointer", bin("gcc-fp-nocfi")}, want: 0},
		{name: "two rules ignored", args: []string{"--ignore=frame-pointer-missing,leaf-frame-pointer", bin("gcc-nofp")}, want: 0},
		{name: "no args", args: nil, want: 1, stderr: "name at least one PATH or PID"},
		{name: "bad format", args: []string{"--format", "xml", bin("clang-good")}, want: 1, stderr: "unknown --format"},
		{name: "bad flag", args: []string{"--nope", bin("clang-good")}, want: 1, stderr: "flag provided but not defined"},
		{name: "flag typo", args: []string{"--fromat", "json", bin("clang-good")}, want: 1, stderr: "(did you mean --format?)"},
		{name: "flag after path", args: []string{bin("clang-good"), "--format", "json"}, want: 0, stdoutRe: `"version": 1`},
		{name: "path after --", args: []string{"--", "--format"}, want: 1, stderr: "check --format: stat --format: no such file"},
		{name: "unknown rule", args: []string{"--ignore", "no-such-rule", bin("clang-good")}, want: 1, stderr: "unknown rule"},
		{name: "missing path", args: []string{"/no/such/file"}, want: 1, stderr: "no such file"},
		{name: "not a target", args: []string{fixtures + "/src/prog.c"}, want: 1, stderr: "not an ELF file"},
		{name: "gone pid", args: []string{"999999999"}, want: 1, stderr: "no such process"},
		{name: "empty directory", args: []string{emptyDir}, want: 1, stderr: "0 targets: no build file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := Main(tt.args, &out, &errb); got != tt.want {
				t.Fatalf("exit = %d, want %d\nstdout:%s\nstderr:%s", got, tt.want, out.String(), errb.String())
			}
			if tt.stderr != "" {
				// One line, and for a bad flag a second naming -h.
				lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
				hint := len(lines) == 2 && strings.HasPrefix(lines[1], "Run 'spanprof check -h'")
				if !strings.Contains(errb.String(), tt.stderr) || len(lines) != 1 && !hint {
					t.Errorf("stderr = %q, want one line with %q", errb.String(), tt.stderr)
				}
			}
			if tt.stdoutRe != "" && !strings.Contains(out.String(), tt.stdoutRe) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdoutRe, out.String())
			}
		})
	}
}

func TestJSONOutput(t *testing.T) {
	needFixtures(t)
	var out, errb bytes.Buffer
	if code := Main([]string{"--format", "json", bin("gcc-nofp"), bin("gcc-fp-nocfi")}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	var rep JSONReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode: %v\n%s", err, out.String())
	}
	if rep.Version != 1 || len(rep.Targets) != 2 || rep.Summary.Errors != 1 || rep.Summary.Warnings != 1 {
		t.Errorf("report header = %+v", rep)
	}
	var fpm *Finding
	for i, f := range rep.Findings {
		if f.Rule == "frame-pointer-missing" {
			fpm = &rep.Findings[i]
		}
	}
	if fpm == nil || fpm.Severity != SevError || fpm.Target != bin("gcc-nofp") || fpm.Fix == "" || len(fpm.Functions) != 2 {
		t.Errorf("frame-pointer-missing finding = %+v", fpm)
	}
}

// A cgo binary: C functions follow the C rule, Go functions do not.
func TestCgoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a cgo program")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	out := filepath.Join(t.TempDir(), "gocgo")
	cmd := exec.Command("go", "build", "-o", out, "main.go")
	cmd.Dir = filepath.Join(fixtures, "gocgo")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -fomit-frame-pointer")
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

// BenchmarkCheckLibc times a whole check of a ~2 MB shared library, the
// size the acceptance figure is quoted for. With libc6-dbg installed the
// symbols come from the build-ID debug file (all ~3600 functions).
func BenchmarkCheckLibc(b *testing.B) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		b.Skip("no", libc)
	}
	for _, tc := range []struct{ name, debugRoot string }{{"dynsym", b.TempDir()}, {"debugfile", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				c := &Checker{DebugRoot: tc.debugRoot}
				if _, err := c.Run([]string{libc}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
