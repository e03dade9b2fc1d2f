package perfmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAndLookup(t *testing.T) {
	text := strings.Join([]string{
		"7f0000001000 40 LazyCompile:*foo /app/x.js:3",
		"0x7f0000002000 0x20 bar",
		"7f0000001020 10 inner_recompiled", // later line overlapping foo
		"garbage line",
		"7f0000003000 zz bad size",
		"7f00000040", // partial last line of a file being written
	}, "\n")
	tab, bad, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 3 || bad != 3 {
		t.Errorf("Len %d, bad %d; want 3 and 3", tab.Len(), bad)
	}
	tests := []struct {
		addr uint64
		want string
	}{
		{0x7f0000001000, "LazyCompile:*foo /app/x.js:3"},
		{0x7f000000103f, "LazyCompile:*foo /app/x.js:3"},
		{0x7f0000001025, "inner_recompiled"},
		{0x7f0000001040, ""},
		{0x7f0000002010, "bar"},
		{0x7f0000002020, ""},
		{0x1000, ""},
	}
	for _, tt := range tests {
		s, ok := tab.Lookup(tt.addr)
		if s.Name != tt.want || ok != (tt.want != "") {
			t.Errorf("Lookup(%#x) = %q, %v; want %q", tt.addr, s.Name, ok, tt.want)
		}
	}
}

// TestCacheRereads appends to a map file the way a JIT does and checks
// that new functions are found, and that the size bound holds.
func TestCacheRereads(t *testing.T) {
	root := t.TempDir()
	const pid = 4242
	path := filepath.Join(root, fmt.Sprint(pid), "root", "tmp", fmt.Sprintf("perf-%d.map", pid))
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte("1000 10 first\n"), 0o644)
	c := New(Options{ProcRoot: root, MaxBytes: 64})
	if n, ok := c.Lookup(pid, 0x1008); !ok || n != "first" {
		t.Fatalf("Lookup = %q, %v", n, ok)
	}
	if _, ok := c.Lookup(pid, 0x2008); ok {
		t.Fatal("found a function not yet written")
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("2000 10 second\n")
	f.Close()
	if n, ok := c.Lookup(pid, 0x2008); !ok || n != "second" {
		t.Errorf("after append Lookup = %q, %v", n, ok)
	}
	// Past MaxBytes (64) the file is cut and counted.
	f, _ = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(strings.Repeat("9000 10 padding_padding_padding\n", 4) + "3000 10 third\n")
	f.Close()
	if n, ok := c.Lookup(pid, 0x3008); ok {
		t.Errorf("Lookup beyond the size bound = %q", n)
	}
	if st := c.Stats(); st.Truncated == 0 || st.Reads != 3 {
		t.Errorf("Stats = %+v, want 3 reads and a truncation", st)
	}
	// Once the process and its file are gone, the last table answers.
	os.Remove(path)
	if n, ok := c.Lookup(pid, 0x1008); !ok || n != "first" {
		t.Errorf("after removal Lookup = %q, %v", n, ok)
	}
	if _, ok := c.Lookup(999, 0x1008); ok {
		t.Error("Lookup in a process without a map file succeeded")
	}
}
