package collect

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

//go:noinline
func leafMarker(n int) int { return n * 3 }

//go:noinline
func callerMarker(n int) int { return leafMarker(n) + 1 }

//go:noinline
func outerMarker(n int) int { return callerMarker(n) + 2 }

// bodyReturn returns a return address into fn past its prologue, where its
// frame pointer is set up (CFA = rbp+16): what a call from its body
// leaves on the stack, and where the kernel's frame-pointer walk is right.
func bodyReturn(t testing.TB, fn any) uint64 {
	t.Helper()
	f := &CFILeafFixer{Tables: unwind.NewCache(nil, unwind.CacheOptions{})}
	p := proc.NewTracker("/proc", nil).Get(uint32(os.Getpid()))
	entry := uint64(reflect.ValueOf(fn).Pointer())
	m := p.Find(entry)
	if m == nil {
		t.Fatalf("no mapping holds %#x", entry)
	}
	for off := uint64(1); off < 256; off++ {
		if r := f.rule(p, m, entry+off); r.Kind == unwind.FPOffset {
			return entry + off + 1
		}
	}
	t.Fatalf("no frame set up in the first 256 bytes of the function at %#x", entry)
	return 0
}

// TestAddRecoversLeafCaller feeds records of this process sampled at the
// first instruction of a Go function, where the CFA is RSP+8 and the
// frame-pointer walk has skipped the caller: the collector must put the
// return address from the stack copy back, on the first record (tables
// read) and on repeats of the same ip (rule remembered), and cut a
// record's stack at the leaf when the stack copy does not reach the return
// address: the kernel's chain would skip the caller there.
func TestAddRecoversLeafCaller(t *testing.T) {
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	caller := bodyReturn(t, callerMarker)
	outer := bodyReturn(t, outerMarker)
	top := make([]byte, 64)
	binary.LittleEndian.PutUint64(top, caller)

	c := New(Options{Frequency: 99})
	pid := uint32(os.Getpid())
	rec := func(stackTop []byte) *sampler.Record {
		return &sampler.Record{
			Kind: sampler.OnCPU, PID: pid, TID: pid, Comm: "test", Time: time.Now(), Value: 1,
			UserIP: leaf, UserSP: 0x7ffd0000, StackTop: stackTop,
			// The walk went from the leaf straight to its caller's caller.
			UserStack: []uint64{leaf, outer},
		}
	}
	c.Add(rec(top))
	c.Add(rec(top))
	c.Add(rec(top[:4])) // the copy ends before the return address
	if st := c.Stats(); st.Samples != 3 || st.LeafRecovered != 2 || st.UnwindCFIFrames != 2 || st.UnwindWindowCut != 1 {
		t.Fatalf("stats %+v, want 3 samples, 2 recovered by one CFI frame each, 1 cut by the window", st)
	}
	prof := c.Build(time.Now())
	for i, s := range prof.Samples {
		var names []string
		for _, f := range s.Frames {
			names = append(names, f.Function)
		}
		got := strings.Join(names, " ")
		want := "leafMarker callerMarker outerMarker"
		if i == 2 {
			want = "leafMarker"
		}
		if shortNames(got) != want {
			t.Errorf("sample %d: frames %q, want %q", i, got, want)
		}
	}
}

// shortNames drops package paths from Go function names.
func shortNames(s string) string {
	var out []string
	for _, f := range strings.Fields(s) {
		out = append(out, f[strings.LastIndexByte(f, '.')+1:])
	}
	return strings.Join(out, " ")
}

// TestLoadSegmentsTranslateAsTheFile checks that the PT_LOAD headers the
// leaf fixer keeps, without the file's readers, translate file offsets to
// the same addresses as the program headers read from the file.
func TestLoadSegmentsTranslateAsTheFile(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	kept := loadSegments(ef.Progs)
	loads := 0
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		loads++
		for _, off := range []uint64{p.Off, p.Off + p.Filesz/2, p.Off + p.Filesz - 1, p.Off + p.Filesz} {
			want, wantOK := symbolize.OffsetToVirtual(ef.Progs, off)
			got, ok := symbolize.OffsetToVirtual(kept, off)
			if got != want || ok != wantOK {
				t.Errorf("offset %#x: %#x %v, want %#x %v", off, got, ok, want, wantOK)
			}
		}
	}
	if len(kept) != loads || loads == 0 {
		t.Errorf("kept %d headers of %d PT_LOAD segments", len(kept), loads)
	}
	for _, p := range kept {
		if p.ReaderAt != nil {
			t.Errorf("segment at %#x keeps a reader of the file", p.Vaddr)
		}
	}
}

// TestLeafTablesGoIdle checks that the leaf fixer holds unwind tables
// only through their cache: once the cache dropped an idle table, its
// memory is not pinned by the fixer, and the next ip not seen before
// reads the table again.
func TestLeafTablesGoIdle(t *testing.T) {
	now := time.Unix(1e9, 0)
	tables := unwind.NewCache(nil, unwind.CacheOptions{IdleTimeout: 5 * time.Minute, Now: func() time.Time { return now }})
	f := &CFILeafFixer{Tables: tables}
	p := proc.NewTracker("/proc", nil).Get(uint32(os.Getpid()))
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	m := p.Find(leaf)
	if m == nil || m.Anonymous() {
		t.Fatalf("no file mapping holds this test's code at %#x", leaf)
	}
	want := unwind.Rule{Kind: unwind.SPOffset, Offset: 8}
	if r := f.rule(p, m, leaf); r != want || tables.Len() != 1 {
		t.Fatalf("rule %+v with %d tables read, want %+v from one", r, tables.Len(), want)
	}
	now = now.Add(6 * time.Minute)
	f.Trim()
	if tables.Len() != 0 || tables.Bytes() != 0 {
		t.Fatalf("after 6m idle the cache holds %d tables, %d bytes", tables.Len(), tables.Bytes())
	}
	caller := uint64(reflect.ValueOf(callerMarker).Pointer())
	if r := f.rule(p, m, caller); r != want || tables.Len() != 1 {
		t.Errorf("new ip after the table went idle: rule %+v with %d tables, want %+v from the table read again", r, tables.Len(), want)
	}
}

// The [vdso] mapping's rules come from the collector's copy of the image
// (CFILeafFixer.VDSO): without it the vDSO has none, and the walk there
// follows the kernel's chain, which skips a frameless caller.
func TestLeafVDSORules(t *testing.T) {
	v, err := symbolize.SelfVDSO()
	if err != nil {
		t.Skipf("no vDSO: %v", err)
	}
	ef, err := elf.Open(v.Path())
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.DynamicSymbols()
	ef.Close()
	var fn elf.Symbol
	for _, s := range syms {
		if strings.Contains(s.Name, "clock_gettime") && s.Size > 0 {
			fn = s
		}
	}
	if fn.Size == 0 {
		t.Fatal("no clock_gettime in the vDSO")
	}
	p := proc.NewTracker("/proc", nil).Get(uint32(os.Getpid()))
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var m *proc.Mapping
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasSuffix(line, "[vdso]") {
			lo, _, _ := strings.Cut(line, "-")
			start, _ := strconv.ParseUint(lo, 16, 64)
			m = p.Find(start)
		}
	}
	if m == nil || m.Path != "[vdso]" {
		t.Fatal("no [vdso] mapping in this process")
	}
	ip := m.Start + fn.Value // its entry: CFA from sp on either architecture
	without := &CFILeafFixer{Tables: unwind.NewCache(nil, unwind.CacheOptions{})}
	if r := without.rule(p, m, ip); r.Kind != unwind.Unknown {
		t.Fatalf("without the image: rule %+v, want none", r)
	}
	with := &CFILeafFixer{Tables: unwind.NewCache(nil, unwind.CacheOptions{}), VDSO: v}
	if r := with.rule(p, m, ip); r.Kind != unwind.SPOffset {
		t.Fatalf("%s in [vdso]: rule %+v, want the CFA from sp (its .eh_frame, or a verified leaf's)", fn.Name, r)
	}
}
