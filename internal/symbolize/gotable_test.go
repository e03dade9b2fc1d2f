package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// TestGoLazyMatchesGosym reads the pclntab of the test binary and of Go
// fixtures in place and
// checks every function's name, file and line, at its entry and in its
// middle, against debug/gosym, which decodes the whole table.
func TestGoLazyMatchesGosym(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{exe, fixture("goprog"), fixture("goprog-pie"), fixture("goprog-cgo-ext"), fixture("goprog-stripped")} {
		t.Run(filepath.Base(p), func(t *testing.T) { testGoLazyMatchesGosym(t, p) })
	}
}

func testGoLazyMatchesGosym(t *testing.T, exe string) {
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
	defer runtime.KeepAlive(p) // gosym reads p.Data, maybe a mapping p owns
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

// TestGoSymtabNotKeptTwice opens Go programs with cgo (internal and
// external linking, PIE) and checks
// that every function symbol of its .symtab resolves, at its start and
// last byte, to what the whole symbol table and the pclntab together say,
// while the object keeps only the symbols the pclntab does not cover.
func TestGoSymtabNotKeptTwice(t *testing.T) {
	for _, name := range []string{"goprog-cgo", "goprog-cgo-ext", "goprog-cgo-pie"} {
		t.Run(name, func(t *testing.T) { testGoSymtabNotKeptTwice(t, fixture(name)) })
	}
}

func testGoSymtabNotKeptTwice(t *testing.T, exe string) {
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	full := newSymtab(f)
	p, err := gopclntab.Find(f)
	if err != nil {
		t.Fatal(err)
	}
	gt, err := newGoTable(p)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(nil, Options{}).Open(exe, exe)
	if err != nil {
		t.Fatal(err)
	}
	if !o.IsGo() {
		t.Fatal("the test binary is not seen as Go")
	}
	if o.NumSymbols() >= full.len()/4 {
		t.Errorf("object keeps %d of %d function symbols: the pclntab's are kept twice", o.NumSymbols(), full.len())
	}
	outside := 0
	for _, s := range full.syms {
		for _, pc := range []uint64{s.addr, max(s.addr, s.end-1)} {
			want, _, _, ok := gt.lookup(pc)
			if !ok {
				outside++
				want = full.name(s)
				if r, ok := full.lookup(pc); ok {
					want = full.name(r)
				}
			}
			got, ok := o.Lookup(pc)
			if !ok || got.Function != o.demangle(want) {
				t.Fatalf("pc %#x (%s): got %q %v, want %q", pc, full.name(s), got.Function, ok, want)
			}
		}
	}
	if outside == 0 {
		t.Error("no symbol outside the pclntab: the fixture was expected to link C code")
	}
	t.Logf("%d function symbols, %d kept; %d addresses outside the pclntab", full.len(), o.NumSymbols(), outside)
}
