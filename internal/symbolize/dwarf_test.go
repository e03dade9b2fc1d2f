package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// addr2line is the ground truth for file, line and inlined frames:
// binutils' addr2line -f -i -C, innermost first, one pair of lines per
// frame.
func addr2line(t *testing.T, path string, addrs []uint64) [][]Symbol {
	t.Helper()
	// -a prints each address first, which separates the answers.
	return symbolizeWith(t, addrs, "addr2line", "-a", "-f", "-i", "-C", "-e", path)
}

// llvmSymbolizer is the same ground truth from llvm-symbolizer in
// addr2line's output style. binutils 2.40's addr2line names the wrong
// file for rows of DWARF 5 line tables that come from an included file
// (libc's getgrnam.c:116 for ../nss/getXXbyYY.c:116), which
// llvm-symbolizer and readelf --debug-dump=decodedline get right.
func llvmSymbolizer(t *testing.T, path string, addrs []uint64) [][]Symbol {
	t.Helper()
	return symbolizeWith(t, addrs, "llvm-symbolizer", "--output-style=GNU", "-a", "-f", "-i", "-C", "--obj="+path)
}

func symbolizeWith(t *testing.T, addrs []uint64, tool string, args ...string) [][]Symbol {
	t.Helper()
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.Command(tool, args...)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var res [][]Symbol
	sc := bufio.NewScanner(bytes.NewReader(out))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line output %q: expected an address", lines[i])
		}
		i++
		var chain []Symbol
		for i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x") {
			fn := lines[i]
			loc, _, _ := strings.Cut(lines[i+1], " (discriminator")
			file, ln, _ := strings.Cut(loc, ":")
			n, _ := strconv.Atoi(ln)
			chain = append(chain, Symbol{Function: fn, File: file, Line: n, Inlined: true})
			i += 2
		}
		if len(chain) > 0 {
			chain[len(chain)-1].Inlined = false
		}
		res = append(res, chain)
	}
	return res
}

// TestDWARFLines checks every instruction address of the fixtures'
// functions against addr2line: the same inlined chain, names, files and
// lines. The stripped fixture gets them from its debug file.
func TestDWARFLines(t *testing.T) {
	tests := []struct {
		bin, symbols string
		debugDir     bool
		funcs        []string
		wantInlined  bool
	}{
		{"inline-gcc", "inline-gcc", false, []string{"outer", "main"}, true},
		{"inline-clang", "inline-clang", false, []string{"outer", "main"}, true},
		{"chain-gcc", "chain-gcc", false, []string{"leaf", "d", "a", "main"}, false},
		{"inline-gcc-stripped", "inline-gcc", true, []string{"outer", "main"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.bin, func(t *testing.T) {
			path := fixture(tt.bin)
			opts := Options{DebugDirs: []string{}}
			if tt.debugDir {
				dir := t.TempDir()
				copyFile(t, fixture(tt.symbols+".debug"), buildIDPath(dir, readelfBuildID(t, path)))
				opts.DebugDirs = []string{dir}
			}
			obj, err := New(nil, opts).Open(path, path)
			if err != nil {
				t.Fatal(err)
			}
			if !obj.HasDWARF() {
				t.Fatal("no DWARF tables loaded")
			}
			truth := nmSymbols(t, fixture(tt.symbols))
			sizes := nmSizes(t, fixture(tt.symbols))
			var addrs []uint64
			for _, fn := range tt.funcs {
				for a := truth[fn]; a < truth[fn]+sizes[fn]; a++ {
					addrs = append(addrs, a)
				}
			}
			want := addr2line(t, fixture(tt.symbols), addrs)
			inlined, checked := 0, 0
			for i, a := range addrs {
				got := obj.LookupInlined(a, nil)
				w := want[i]
				// addr2line names the outer function from DWARF, which
				// for C equals the symbol table's name.
				if len(w) == 0 || w[len(w)-1].Line == 0 {
					continue // no line row (padding); nothing to compare
				}
				checked++
				if fmt.Sprint(stripDirs(got)) != fmt.Sprint(stripDirs(w)) {
					t.Errorf("%#x: got %v, addr2line %v", a, got, w)
				}
				if len(got) > 1 {
					inlined++
				}
			}
			t.Logf("%d addresses checked, %d with inlined frames", checked, inlined)
			if checked < len(addrs)/2 {
				t.Errorf("only %d of %d addresses had a line", checked, len(addrs))
			}
			if tt.wantInlined && inlined == 0 {
				t.Error("no inlined frames found")
			}
		})
	}
}

// stripDirs compares file names only: addr2line prints the directory
// from the line table's include_directories, which DWARF 4 and 5 spell
// differently.
func stripDirs(chain []Symbol) []Symbol {
	out := make([]Symbol, len(chain))
	for i, s := range chain {
		s.File = filepath.Base(s.File)
		out[i] = s
	}
	return out
}

// nmSizes reads symbol sizes (nm -S).
func nmSizes(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("nm", "-S", "--defined-only", path).Output()
	if err != nil {
		t.Fatalf("nm -S: %v", err)
	}
	sizes := map[string]uint64{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 16, 64)
		if err == nil {
			sizes[f[3]] = n
		}
	}
	return sizes
}
