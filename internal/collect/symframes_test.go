package collect

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// TestObjectFramesOwnBinary symbolizes a function of this test binary
// through the symbolizer and checks the frames against the Go runtime's
// own table: name, file and line, the exact address and the builder's
// mapping. An address outside the mapping keeps address and mapping, no
// name.
func TestObjectFramesOwnBinary(t *testing.T) {
	addr := uint64(reflect.ValueOf(leafMarker).Pointer()) + 1
	p := proc.NewTracker("/proc", nil).Get(uint32(os.Getpid()))
	m := p.Find(addr)
	if m == nil {
		t.Fatalf("no mapping holds %#x", addr)
	}
	obj, err := symbolize.New(nil, symbolize.Options{DebugDirs: []string{}}).Open(p.OpenPath(m), m.Path)
	if err != nil {
		t.Fatal(err)
	}
	pm := &profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, Path: m.Path}
	setIdentity(pm, obj.Identity())
	if pm.BuildID == "" && pm.HTLHash == "" {
		t.Error("mapping has neither build ID nor HTL hash")
	}
	fn := runtime.FuncForPC(uintptr(addr))
	file, line := fn.FileLine(uintptr(addr))
	fs := ObjectFrames(nil, obj, pm, addr)
	if len(fs) != 1 || fs[0].Function != fn.Name() || fs[0].Address != addr || fs[0].Mapping != pm {
		t.Fatalf("frames of %s+1 = %+v, want one frame of %s at %#x in the mapping", fn.Name(), fs, fn.Name(), addr)
	}
	if fs[0].File != file || fs[0].Line != line {
		t.Errorf("%s at %s:%d, want %s:%d", fn.Name(), fs[0].File, fs[0].Line, file, line)
	}

	out := pm.Limit + 0x1000
	fs = ObjectFrames(fs[:0], obj, pm, out)
	if len(fs) != 1 || fs[0].Function != "" || fs[0].Address != out || fs[0].Mapping != pm {
		t.Errorf("out-of-mapping frames = %+v, want one unnamed frame at %#x in the mapping", fs, out)
	}
}

// TestSymbolFramesInlined checks the conversion of an inlined chain: one
// frame per function, innermost first, the Inlined marks kept, all at the
// sample's address in one mapping.
func TestSymbolFramesInlined(t *testing.T) {
	pm := &profile.Mapping{Path: "/bin/x"}
	chain := []symbolize.Symbol{
		{Function: "inner", File: "a.c", Line: 3, Inlined: true},
		{Function: "outer", File: "a.c", Line: 9},
	}
	fs := symbolFrames([]profile.Frame{{Function: "kept"}}, chain, pm, 0x1234)
	if len(fs) != 3 || fs[0].Function != "kept" {
		t.Fatalf("frames = %+v, want the one given and two more", fs)
	}
	for i, s := range chain {
		f := fs[1+i]
		if f.Function != s.Function || f.File != s.File || f.Line != s.Line || f.Inlined != s.Inlined ||
			f.Address != 0x1234 || f.Mapping != pm || f.NoSymbol {
			t.Errorf("frame %d = %+v, want %+v at 0x1234 in the mapping", i, f, s)
		}
	}
}

// TestKernelFrames checks the kernel frames made from a kallsyms table:
// function and module, one mapping shared by the frames of a module and
// marked Kernel, and an unknown address left in the kernel image.
func TestKernelFrames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kallsyms")
	const table = "ffffffff81000000 T _stext\nffffffff81000100 T schedule\n" +
		"ffffffffc0001000 t nf_hook\t[nf_tables]\nffffffffc0001100 t nf_other\t[nf_tables]\n"
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := symbolize.LoadKallsyms(path)
	if err != nil {
		t.Fatal(err)
	}
	kf := KernelFrames(k)
	tests := []struct {
		addr     uint64
		function string
		module   string
	}{
		{0xffffffff81000104, "schedule", "[kernel.kallsyms]"},
		{0xffffffffc0001010, "nf_hook", "[nf_tables]"},
		{0xffffffffc0001110, "nf_other", "[nf_tables]"},
		{0xffffffff80000000, "", "[kernel.kallsyms]"},
	}
	byPath := map[string]*profile.Mapping{}
	for _, tt := range tests {
		fs := kf.Frames(nil, tt.addr)
		if len(fs) != 1 || fs[0].Function != tt.function || fs[0].Address != tt.addr ||
			fs[0].Mapping == nil || fs[0].Mapping.Path != tt.module || !fs[0].Mapping.Kernel {
			t.Errorf("Frames(%#x) = %+v, want %q in %s", tt.addr, fs, tt.function, tt.module)
			continue
		}
		if prev, ok := byPath[tt.module]; ok && prev != fs[0].Mapping {
			t.Errorf("Frames(%#x): a second mapping of %s", tt.addr, tt.module)
		}
		byPath[tt.module] = fs[0].Mapping
	}
	if got, want := byPath["[kernel.kallsyms]"].BuildID, k.Modules()[0].BuildID; got != want {
		t.Errorf("kernel mapping build ID %q, want kallsyms' %q", got, want)
	}
}
