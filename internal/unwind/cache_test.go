package unwind

import (
	"debug/elf"
	"errors"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/gopclntab"
	"github.com/spanprof/spanprof/internal/symbolize"
)

func TestCache(t *testing.T) {
	c := NewCache(nil, CacheOptions{Max: 1})
	a, err := c.Table("gnu:a", fixture("chain-gcc"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Table("gnu:a", "/nonexistent"); again != a {
		t.Error("second lookup of a key re-read the file")
	}
	if _, err := c.Table("gnu:b", fixture("chain-clang")); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 {
		t.Errorf("cache holds %d tables, bound is 1", c.Len())
	}
	if _, err := c.Table("gnu:a", "/nonexistent"); err == nil {
		t.Error("evicted key was served without reading the file")
	}
}

// TestScanMatchesHdr checks the scanned FDE index (used when there is no
// .eh_frame_hdr) against the .eh_frame_hdr search table on libc.
func TestScanMatchesHdr(t *testing.T) {
	f, err := elf.Open(libc)
	if err != nil {
		t.Skipf("no %s: %v", libc, err)
	}
	defer f.Close()
	withHdr, err := loadFrameSection(f, AMD64, false)
	if err != nil {
		t.Fatal(err)
	}
	if withHdr.hdr == nil {
		t.Fatal("libc's .eh_frame_hdr was not used")
	}
	scanned := &frameSection{data: withHdr.data, addr: withHdr.addr, cies: map[int]*cie{}}
	if err := scanned.scan(); err != nil {
		t.Fatal(err)
	}
	if len(scanned.fdes) != len(withHdr.hdr)/8 {
		t.Errorf("scan found %d FDEs, .eh_frame_hdr lists %d", len(scanned.fdes), len(withHdr.hdr)/8)
	}
	for _, fde := range scanned.fdes {
		for _, pc := range []uint64{fde.start, (fde.start + fde.end) / 2, fde.end - 1} {
			off, ok := withHdr.find(pc)
			if !ok || off != fde.off {
				t.Fatalf("pc %#x: hdr finds FDE at %d (%v), scan at %d", pc, off, ok, fde.off)
			}
		}
	}
}

// TestCacheBytes checks what the byte bound counts: the sections a table
// maps from the file (a Go pclntab, .eh_frame) are not charged, their pages
// being dropped at each Trim; what is read onto the heap is. Over the bound
// the least recently used table goes, and the eviction is counted.
func TestCacheBytes(t *testing.T) {
	c := NewCache(nil, CacheOptions{Max: 100})
	for _, tc := range []struct{ key, name, section, fn string }{
		{"go", "goprog", ".gopclntab", "main.main"},
		{"gcc", "chain-gcc", ".eh_frame", "main"},
	} {
		tab, err := c.Table(tc.key, fixture(tc.name))
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(fixture(tc.name))
		if err != nil {
			t.Fatal(err)
		}
		size := f.Section(tc.section).Size
		syms, err := f.Symbols()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var fn uint64
		for _, sym := range syms {
			if sym.Name == tc.fn {
				fn = sym.Value
			}
		}
		if tab.Size() >= int64(size) {
			t.Errorf("%s: table holds %d bytes, want its %d-byte %s mapped, not counted", tc.name, tab.Size(), size, tc.section)
		}
		before, err := tab.RuleAt(fn + 1)
		if err != nil {
			t.Fatalf("%s: rule at %s+1: %v", tc.name, tc.fn, err)
		}
		tab.dropPages()
		if after, err := tab.RuleAt(fn + 1); err != nil || after != before {
			t.Errorf("%s: rule after its pages were dropped: %v, %v; want %v", tc.name, after, err, before)
		}
	}
	dbg, err := c.Table("debugframe", fixture("chain-gcc-debugframe"))
	if err != nil {
		t.Fatal(err)
	}
	if dbg.Size() <= 0 {
		t.Fatalf("a .debug_frame table holds %d bytes, want its read section or index counted", dbg.Size())
	}
	c.SetMaxBytes(dbg.Size() - 1)
	if c.Len() != 1 || c.Bytes() != dbg.Size() {
		t.Errorf("past the bound: %d tables, %d bytes; want 1 table of %d bytes", c.Len(), c.Bytes(), dbg.Size())
	}
	if bound, idle := c.Evicted(); bound != 2 || idle != 0 {
		t.Errorf("evictions counted: %d bound, %d idle; want 2 and 0", bound, idle)
	}
	// The most recent table stays even when it alone is over the bound.
	c.SetMaxBytes(1)
	if c.Len() != 1 {
		t.Errorf("the most recent table was evicted: %d tables", c.Len())
	}
}

// fakeClock is a settable clock for the idle timeout.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }

// TestCacheIdle checks that Trim drops the tables Table has not returned
// for the idle timeout, and only those.
func TestCacheIdle(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	c := NewCache(nil, CacheOptions{IdleTimeout: 5 * time.Minute, Now: clock.now})
	if _, err := c.Table("go", fixture("goprog")); err != nil {
		t.Fatal(err)
	}
	clock.add(3 * time.Minute)
	b, err := c.Table("c", fixture("chain-clang"))
	if err != nil {
		t.Fatal(err)
	}
	clock.add(2*time.Minute + time.Second)
	c.Trim()
	if c.Len() != 1 || c.Bytes() != b.Size() {
		t.Fatalf("after goprog idled 5m1s: %d tables, %d bytes; want chain-clang's alone, %d bytes", c.Len(), c.Bytes(), b.Size())
	}
	if _, err := c.Table("go", "/nonexistent"); err == nil {
		t.Error("the idle table was served without reading the file")
	}
	// A lookup renews a table.
	clock.add(2 * time.Minute)
	if again, _ := c.Table("c", "/nonexistent"); again != b {
		t.Error("chain-clang was read again")
	}
	clock.add(4 * time.Minute)
	c.Trim()
	if _, ok := c.items["c"]; !ok {
		t.Error("chain-clang, used 4m ago, was dropped")
	}
	clock.add(2 * time.Minute)
	c.Trim()
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("everything idle: %d tables, %d bytes left", c.Len(), c.Bytes())
	}
	// goprog, the failed read of "go" and chain-clang.
	if bound, idle := c.Evicted(); bound != 0 || idle != 3 {
		t.Errorf("evictions counted: %d bound, %d idle; want 0 and 3", bound, idle)
	}
}

// TestPclntabShared checks that the symbolizer and the unwind cache keep
// one copy of a Go binary's pclntab, counted once between them, and that
// the count passes to the cache when the symbolizer lets go.
func TestPclntabShared(t *testing.T) {
	path := fixture("goprog")
	id, err := symbolize.Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	if id.BuildID == "" {
		t.Fatalf("%s has no GNU build ID", path)
	}
	store := gopclntab.NewStore()
	sym := symbolize.New(nil, symbolize.Options{Pclntabs: store, MaxObjects: 1})
	if _, err := sym.Open(path, path); err != nil {
		t.Fatal(err)
	}
	symBytes := sym.Bytes()
	c := NewCache(nil, CacheOptions{Pclntabs: store})
	tab, err := c.Table(id.Key(), path)
	if err != nil {
		t.Fatal(err)
	}
	if tab.pcln == nil {
		t.Fatal("the Go binary's table has no pclntab")
	}
	// What the store holds is what the symbolizer read.
	p, err := store.Holder().Claim(id.Key(), func() (*gopclntab.Table, error) {
		return nil, errors.New("the store lost the symbolizer's pclntab")
	})
	if err != nil {
		t.Fatal(err)
	}
	if &p.Data[0] != &tab.pcln.Data[0] {
		t.Error("the unwind table read its own copy of the pclntab")
	}
	if store.Len() != 1 || store.Bytes() != tab.pcln.Size() {
		t.Errorf("store holds %d tables of %d bytes, want one of %d", store.Len(), store.Bytes(), tab.pcln.Size())
	}
	// The symbolizer, first to claim it, pays for it; the cache pays for
	// the rest of its table only.
	if got, want := c.Bytes(), tab.Size()-tab.pcln.Size(); got != want {
		t.Errorf("cache counts %d bytes, want %d (its table without the shared pclntab)", got, want)
	}
	if sym.Bytes() != symBytes || symBytes < tab.pcln.Size() {
		t.Errorf("symbolizer counts %d bytes (%d before the cache), want its object with the pclntab (%d)", sym.Bytes(), symBytes, tab.pcln.Size())
	}
	// The symbolizer drops the object for another: the cache pays from
	// now on.
	other := fixture("chain-clang")
	if _, err := sym.Open(other, other); err != nil {
		t.Fatal(err)
	}
	if sym.Stats().Evicted != 1 || sym.Pclntabs().Len() != 1 {
		t.Fatalf("symbolizer evicted %d objects, store holds %d pclntabs; want goprog's evicted, its pclntab kept by the cache",
			sym.Stats().Evicted, sym.Pclntabs().Len())
	}
	if c.Bytes() != tab.Size() {
		t.Errorf("cache counts %d bytes after the symbolizer let go, want its whole table, %d", c.Bytes(), tab.Size())
	}
}
