package perfmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dumpWriter writes jitdump files as the format describes them.
type dumpWriter struct{ bytes.Buffer }

func newDump(magic, version uint32) *dumpWriter {
	d := &dumpWriter{}
	d.u32(magic, version, jitdumpHeader, 62, 0, 4242)
	d.u64(123, 0)
	return d
}

func (d *dumpWriter) u32(vs ...uint32) {
	for _, v := range vs {
		binary.Write(&d.Buffer, binary.LittleEndian, v)
	}
}

func (d *dumpWriter) u64(vs ...uint64) {
	for _, v := range vs {
		binary.Write(&d.Buffer, binary.LittleEndian, v)
	}
}

func (d *dumpWriter) load(addr, size uint64, name string) {
	code := bytes.Repeat([]byte{0xc3}, int(size))
	d.u32(jitCodeLoad, uint32(jitLoadFixed+len(name)+1+len(code)))
	d.u64(7)
	d.u32(4242, 4243)
	d.u64(addr, addr, size, 1)
	d.WriteString(name)
	d.WriteByte(0)
	d.Write(code)
}

func (d *dumpWriter) move(from, to, size uint64) {
	d.u32(jitCodeMove, jitMoveSize)
	d.u64(8)
	d.u32(4242, 4243)
	d.u64(from, from, to, size, 1)
}

// other writes a record spanprof does not read (unwinding information).
func (d *dumpWriter) other(id uint32, body int) {
	d.u32(id, uint32(jitRecordHead+body))
	d.u64(9)
	d.Write(make([]byte, body))
}

func TestParseJITDump(t *testing.T) {
	d := newDump(jitdumpMagic, jitdumpVersion)
	d.other(4, 100) // JIT_CODE_UNWINDING_INFO
	d.load(0x7f0000001000, 11, "py::inner:/app/x.py")
	d.other(2, 40) // JIT_CODE_DEBUG_INFO
	d.load(0x7f0000001010, 11, "py::middle:/app/x.py")
	d.move(0x7f0000001010, 0x7f0000005000, 11)
	whole := d.Len()
	d.u32(jitCodeLoad, 200) // a record being written: cut short
	tab, err := ParseJITDump(d.Bytes())
	if err != nil {
		t.Fatalf("ParseJITDump: %v", err)
	}
	for _, tt := range []struct {
		addr uint64
		want string
	}{
		{0x7f0000001000, "py::inner:/app/x.py"}, {0x7f000000100a, "py::inner:/app/x.py"},
		{0x7f000000100b, ""}, {0x7f0000001012, "py::middle:/app/x.py"}, {0x7f0000005004, "py::middle:/app/x.py"},
		{0x7f000000500b, ""},
	} {
		if s, ok := tab.Lookup(tt.addr); s.Name != tt.want || ok != (tt.want != "") {
			t.Errorf("Lookup(%#x) = %q, %v; want %q", tt.addr, s.Name, ok, tt.want)
		}
	}

	// A malformed record ends the file there; the loads before it stay.
	bad := append([]byte(nil), d.Bytes()[:whole]...)
	bad = binary.LittleEndian.AppendUint32(bad, jitCodeLoad)
	bad = binary.LittleEndian.AppendUint32(bad, 8) // shorter than a record's header
	bad = append(bad, make([]byte, 8)...)
	tab, err = ParseJITDump(bad)
	if !errors.Is(err, ErrJITDump) || tab == nil || tab.Len() != 3 {
		t.Errorf("malformed record: %v, table %v; want ErrJITDump and the 3 entries before it", err, tab)
	}

	for name, b := range map[string][]byte{
		"magic":   newDump(0x12345678, jitdumpVersion).Bytes(),
		"version": newDump(jitdumpMagic, 2).Bytes(),
		"short":   newDump(jitdumpMagic, jitdumpVersion).Bytes()[:20],
	} {
		if tab, err := ParseJITDump(b); !errors.Is(err, ErrJITDump) || tab != nil {
			t.Errorf("bad %s: %v, %v; want ErrJITDump and no table", name, tab, err)
		}
	}
}

// TestCacheJITDump: a process with a jitdump and no perf map is named from
// the dump; a malformed dump is counted and names nothing.
func TestCacheJITDump(t *testing.T) {
	root := t.TempDir()
	write := func(pid int, b []byte) {
		path := filepath.Join(root, fmt.Sprint(pid), "root", "tmp", fmt.Sprintf("jit-%d.dump", pid))
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := newDump(jitdumpMagic, jitdumpVersion)
	d.load(0x1000, 16, "py::f:/a.py")
	write(10, d.Bytes())
	write(11, newDump(0x1, jitdumpVersion).Bytes())
	c := New(Options{ProcRoot: root})
	if n, ok := c.Lookup(10, 0x1004); !ok || n != "py::f:/a.py" {
		t.Errorf("Lookup = %q, %v; want py::f:/a.py", n, ok)
	}
	if n, ok := c.Lookup(11, 0x1004); ok {
		t.Errorf("Lookup in a malformed dump = %q", n)
	}
	if st := c.Stats(); st.BadDumps != 1 || st.Reads != 2 {
		t.Errorf("Stats = %+v; want 2 reads, 1 bad dump", st)
	}
}

// TestRealJITDump reads the jitdump CPython 3.13 writes under -X perf_jit
// for a script of known functions: each is named once, as the perf map
// names it (py::NAME:FILE), and every entry is found at its address.
func TestRealJITDump(t *testing.T) {
	py := pyenvPython(t, "3.13.0")
	dir := t.TempDir()
	script := filepath.Join(dir, "f.py")
	os.WriteFile(script, []byte("import os\ndef alpha():\n    return 1\ndef beta():\n    return alpha()\nbeta()\nprint(os.getpid())\n"), 0o644)
	out, err := exec.Command(py, "-X", "perf_jit", script).Output()
	if err != nil {
		t.Fatalf("run %s -X perf_jit: %v", py, err)
	}
	path := fmt.Sprintf("/tmp/jit-%s.dump", strings.TrimSpace(string(out)))
	defer os.Remove(path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the interpreter wrote no jitdump: %v", err)
	}
	tab, err := ParseJITDump(b)
	if err != nil {
		t.Fatalf("ParseJITDump: %v", err)
	}
	found := map[string]int{}
	for _, s := range tab.syms {
		if strings.HasSuffix(s.Name, ":"+script) {
			found[s.Name]++
		}
		if got, ok := tab.Lookup(s.Start); !ok || got.Name == "" {
			t.Errorf("Lookup(%#x) of an entry failed", s.Start)
		}
	}
	for _, fn := range []string{"alpha", "beta", "<module>"} {
		if n := found["py::"+fn+":"+script]; n != 1 {
			t.Errorf("py::%s:%s in %d entries, want 1 (entries of the script: %v)", fn, script, n, found)
		}
	}
	t.Logf("%d entries, %d bytes", tab.Len(), len(b))
}

// pyenvPython returns the path of pyenv's CPython version v, or skips.
func pyenvPython(t *testing.T, v string) string {
	t.Helper()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	py := filepath.Join(root, "versions", v, "bin", "python3")
	if _, err := os.Stat(py); err != nil {
		t.Skipf("CPython %s not installed at %s (pyenv install %s)", v, py, v)
	}
	return py
}
