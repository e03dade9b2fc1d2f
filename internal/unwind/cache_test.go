package unwind

import (
	"debug/elf"
	"testing"
)

func TestCache(t *testing.T) {
	c := NewCache(nil, 1)
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
	withHdr, err := loadFrameSection(f, false)
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

// TestCacheBytes bounds the cache by the section data its tables hold:
// a Go binary's table keeps the whole pclntab.
func TestCacheBytes(t *testing.T) {
	c := NewCache(nil, 100)
	g, err := c.Table("go", fixture("goprog"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Size() < 100<<10 {
		t.Fatalf("a Go binary's table holds %d bytes, want its pclntab counted", g.Size())
	}
	if c.Bytes() != g.Size() {
		t.Errorf("cache counts %d bytes, table holds %d", c.Bytes(), g.Size())
	}
	c.SetMaxBytes(g.Size())
	b, err := c.Table("c", fixture("chain-clang"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 || c.Bytes() != b.Size() {
		t.Errorf("after a second table past the bound: %d tables, %d bytes; want 1 table of %d bytes", c.Len(), c.Bytes(), b.Size())
	}
	// The most recent table stays even when it alone is over the bound.
	c.SetMaxBytes(1)
	if c.Len() != 1 {
		t.Errorf("the most recent table was evicted: %d tables", c.Len())
	}
}
