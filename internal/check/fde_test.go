package check

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// symbolOffsets names, as module+0xOFFSET, the functions of the
// unstripped twin of a stripped fixture (same source, flags and layout):
// the ground truth for which stripped functions a finding lists.
func symbolOffsets(t *testing.T, twin, module string, names ...string) []string {
	t.Helper()
	f, err := elf.Open(twin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range syms {
		if slices.Contains(names, s.Name) && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out = append(out, fdeName(f, module, s.Value))
		}
	}
	if len(out) != len(names) {
		t.Fatalf("%s: found %v of %v", twin, out, names)
	}
	sort.Strings(out)
	return out
}

// TestStrippedFramePointers: a stripped file without a debug file is
// checked function by function as .eh_frame delimits them, and frame
// pointers that cannot be verified are a warning, never a silent pass.
func TestStrippedFramePointers(t *testing.T) {
	needFixtures(t)
	tests := []struct {
		name, file string
		want       []string // violations
		// twin and the functions, by its symbols, the findings list
		twin          string
		missing, leaf []string
	}{
		{name: "no frame pointers", file: "gcc-nofp-stripped", want: []string{"frame-pointer-missing"},
			twin: "gcc-nofp", missing: []string{"main", "work"}, leaf: []string{"leaf"}},
		{name: "frame pointers, GCC leaf", file: "gcc-fp-stripped", want: []string{},
			twin: "gcc-fp", leaf: []string{"leaf"}},
		{name: "frame pointers, clang", file: "clang-stripped", want: []string{"stripped-no-debuglink"}, twin: "clang-good"},
		{name: "no unwind tables", file: "clang-stripped-nocfi", want: []string{"frame-pointer-unverified", "stripped-no-debuglink"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, &Checker{DebugRoot: t.TempDir()}, bin(tt.file))
			if got := ruleSet(res.Findings, false); !slices.Equal(got, tt.want) {
				t.Errorf("violations = %v, want %v\n%v", got, tt.want, res.Findings)
			}
			var missing, leaf []string
			for _, f := range res.Findings {
				switch f.Rule {
				case "frame-pointer-missing":
					missing = f.Functions
				case "leaf-frame-pointer":
					leaf = f.Functions
				}
			}
			if tt.twin == "" {
				return
			}
			if want := symbolOffsets(t, bin(tt.twin), tt.file, tt.missing...); !slices.Equal(missing, want) && len(want)+len(missing) > 0 {
				t.Errorf("missing = %v, want %v (%v)", missing, want, tt.missing)
			}
			if want := symbolOffsets(t, bin(tt.twin), tt.file, tt.leaf...); !slices.Equal(leaf, want) && len(want)+len(leaf) > 0 {
				t.Errorf("leaf = %v, want %v (%v)", leaf, want, tt.leaf)
			}
		})
	}
}

// TestStrippedSystemBinary: Debian's gzip, stripped and built without
// frame pointers, fails the check: its functions, as readelf's FDEs
// delimit them, call others without a frame.
func TestStrippedSystemBinary(t *testing.T) {
	const path = "/usr/bin/gzip"
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("no %s: %v", path, err)
	}
	defer f.Close()
	if f.Section(".symtab") != nil {
		t.Skipf("%s is not stripped here", path)
	}
	root := t.TempDir() // no debug file, whatever is installed
	res := run(t, &Checker{DebugRoot: root}, path)
	out, err := exec.Command("readelf", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	starts := map[string]bool{}
	for _, m := range regexp.MustCompile(`pc=([0-9a-f]+)\.\.`).FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseUint(string(m[1]), 16, 64)
		starts[fdeName(f, "gzip", v)] = true
	}
	var fpm *Finding
	for i := range res.Findings {
		if res.Findings[i].Rule == "frame-pointer-missing" {
			fpm = &res.Findings[i]
		}
	}
	if fpm == nil || fpm.Severity != SevError {
		t.Fatalf("no frame-pointer-missing error for %s: %v", path, res.Findings)
	}
	if len(fpm.Functions) < 10 {
		t.Errorf("only %d functions flagged: %v", len(fpm.Functions), fpm.Functions)
	}
	for _, fn := range fpm.Functions {
		if !starts[fn] {
			t.Errorf("flagged %q, which no FDE of readelf starts", fn)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".build-id")); err == nil {
		t.Fatal("debug root not empty")
	}
}
