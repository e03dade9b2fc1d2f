package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"os"
	"testing"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// TestGoLazyMatchesGosym reads the test binary's own pclntab in place and
// checks every function's name, file and line, at its entry and in its
// middle, against debug/gosym, which decodes the whole table.
func TestGoLazyMatchesGosym(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := gopclntab.Find(f)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newGoLazy(p)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := gosym.NewTable(nil, gosym.NewLineTable(p.Data, p.TextStart))
	if err != nil {
		t.Fatal(err)
	}
	if l.nfunc != len(ref.Funcs) {
		t.Fatalf("%d functions, gosym has %d", l.nfunc, len(ref.Funcs))
	}
	checked := 0
	for _, fn := range ref.Funcs {
		for _, pc := range []uint64{fn.Entry, fn.Entry + (fn.End-fn.Entry)/2, fn.End - 1} {
			wantFile, wantLine, wantFn := ref.PCToLine(pc)
			if fo, ok := l.find(pc); ok && binary.LittleEndian.Uint32(l.funcdata[fo+24:]) == 0 {
				// No line table (C code of cgo): the runtime says -1,
				// gosym reads the pc-value table at offset 0.
				wantLine = -1
			}
			name, file, line, ok := l.lookup(pc)
			if !ok || wantFn == nil || name != wantFn.Name || file != wantFile || line != wantLine {
				t.Fatalf("pc %#x: got %q %s:%d %v, gosym says %v %s:%d", pc, name, file, line, ok, wantFn, wantFile, wantLine)
			}
			checked++
		}
	}
	if _, _, _, ok := l.lookup(ref.Funcs[len(ref.Funcs)-1].End + 1<<20); ok {
		t.Error("an address past the text has a function")
	}
	if _, _, _, ok := l.lookup(p.TextStart - 1); ok {
		t.Error("an address before the text has a function")
	}
	t.Logf("%d functions, %d addresses agree with debug/gosym; %d bytes of names interned", l.nfunc, checked, l.namesSize())
}
