package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// startAddrs runs a fixture in its "addrs" mode and returns its pid and
// the function addresses it printed. The process lives until the test ends.
func startAddrs(t *testing.T, path string, n int) (int, map[string]uint64) {
	t.Helper()
	cmd := exec.Command(path, "addrs")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	addrs := map[string]uint64{}
	sc := bufio.NewScanner(stdout)
	for len(addrs) < n && sc.Scan() {
		name, hexAddr, _ := strings.Cut(sc.Text(), " ")
		a, err := strconv.ParseUint(strings.TrimPrefix(hexAddr, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("fixture printed %q: %v", sc.Text(), err)
		}
		addrs[name] = a
	}
	if len(addrs) < n {
		t.Fatalf("fixture printed %d addresses, want %d", len(addrs), n)
	}
	return cmd.Process.Pid, addrs
}

// mappingOf finds the /proc/PID/maps line containing addr, the way the
// process tracker will.
func mappingOf(t *testing.T, pid int, addr uint64) liveMapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	for _, l := range strings.Split(string(data), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		limit, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(fs[2], 16, 64)
		if addr >= start && addr < limit {
			return liveMapping{Mapping{Start: start, Limit: limit, Offset: off}, fs[5]}
		}
	}
	t.Fatalf("no mapping of pid %d contains %#x", pid, addr)
	return liveMapping{}
}

// liveMapping is one line of /proc/PID/maps: the range and the path.
type liveMapping struct {
	Mapping
	Path string
}

// TestLiveProcess symbolizes running PIE, non-PIE, stripped and Go
// fixtures through /proc/PID/map_files and /proc/PID/root paths.
func TestLiveProcess(t *testing.T) {
	tests := []struct {
		bin   string
		funcs []string
	}{
		{"chain-gcc", []string{"leaf", "leaf_stack", "leaf_nofp", "d", "c", "b", "a", "main"}},
		{"chain-clang", []string{"leaf", "d", "a", "main"}},
		{"chain-gcc-nobuildid", []string{"leaf", "a"}},
		{"goprog", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-sw", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-pie", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-stripped", []string{"main.alpha", "main.beta", "main.gamma"}},
		// cgo: C code lies before runtime.text, which the function table
		// is relative to.
		{"goprog-cgo", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-cgo-ext", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-cgo-pie", []string{"main.alpha", "main.beta", "main.gamma"}},
		{"goprog-cgo-stripped", []string{"main.alpha", "main.beta", "main.gamma"}},
	}
	s := New(nil, Options{})
	for _, tt := range tests {
		t.Run(tt.bin, func(t *testing.T) {
			abs, err := filepath.Abs(fixture(tt.bin))
			if err != nil {
				t.Fatal(err)
			}
			nlines := 3
			if strings.HasPrefix(tt.bin, "chain") {
				nlines = 9
			}
			pid, addrs := startAddrs(t, abs, nlines)
			for _, fn := range tt.funcs {
				addr, ok := addrs[fn]
				if !ok {
					t.Fatalf("fixture printed no %s", fn)
				}
				m := mappingOf(t, pid, addr)
				opens := []string{fmt.Sprintf("/proc/%d/root%s", pid, m.Path)}
				// map_files takes CAP_SYS_ADMIN, even for a child.
				if testutil.IsRoot() {
					opens = append(opens, fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.Limit))
				}
				for _, open := range opens {
					obj, err := s.Open(open, m.Path)
					if err != nil {
						t.Fatal(err)
					}
					if id := obj.Identity(); id.BuildID == "" && id.HTLHash == "" {
						t.Error("object has neither build ID nor HTL hash")
					}
					frames := obj.Symbols(nil, m.Mapping, addr+1)
					if len(frames) != 1 || frames[0].Function != fn {
						t.Errorf("%s: Symbols(%s+1) = %+v", open, fn, frames)
						continue
					}
					if strings.HasPrefix(fn, "main.") && (!strings.HasSuffix(frames[0].File, "main.go") || frames[0].Line == 0) {
						t.Errorf("%s: %s at %s:%d, want goprog/main.go", open, fn, frames[0].File, frames[0].Line)
					}
				}
			}
			// An address outside the mapping gets no name (the collector
			// keeps module + address).
			m := mappingOf(t, pid, addrs[tt.funcs[0]])
			obj, err := s.Open(fmt.Sprintf("/proc/%d/root%s", pid, m.Path), m.Path)
			if err != nil {
				t.Fatal(err)
			}
			if f := obj.Symbols(nil, m.Mapping, m.Limit+0x1000); len(f) != 0 {
				t.Errorf("out-of-mapping symbols = %+v, want none", f)
			}
		})
	}
}

func TestGoStripped(t *testing.T) {
	truth := nmSymbols(t, fixture("goprog"))
	for _, bin := range []string{"goprog", "goprog-stripped"} {
		t.Run(bin, func(t *testing.T) {
			obj, err := New(nil, Options{}).Open(fixture(bin), bin)
			if err != nil {
				t.Fatal(err)
			}
			if !obj.IsGo() {
				t.Fatal("pclntab not found")
			}
			// nm name → pclntab name (assembly functions carry an ABI suffix
			// in the symbol table only).
			for nmName, fn := range map[string]string{
				"main.alpha": "main.alpha", "main.beta": "main.beta", "main.gamma": "main.gamma",
				"runtime.mallocgc": "runtime.mallocgc", "runtime.goexit.abi0": "runtime.goexit",
			} {
				addr, ok := truth[nmName]
				if !ok {
					t.Fatalf("nm has no %s", nmName)
				}
				s, ok := obj.Lookup(addr)
				if !ok || s.Function != fn {
					t.Errorf("Lookup(%s) = %+v, %v", fn, s, ok)
				}
			}
		})
	}
}
