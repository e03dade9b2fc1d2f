package gopclntab

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"
)

// TestFindMapsPclntab reads the pclntab of this test binary: from a file,
// a mapping that the caches do not charge and whose bytes stay those of
// the section after its pages are dropped; from memory, a heap copy.
func TestFindMapsPclntab(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	want, err := mem.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	heap, err := Find(mem)
	if err != nil {
		t.Fatal(err)
	}
	if heap.Mapped() || heap.Size() != int64(len(want)) {
		t.Errorf("from memory: mapped %v, size %d; want a heap copy of %d bytes", heap.Mapped(), heap.Size(), len(want))
	}

	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Find(f)
	f.Close() // the mapping outlives the file descriptor
	if err != nil {
		t.Fatal(err)
	}
	if !tab.Mapped() || tab.Size() != 0 {
		t.Fatalf("from a file: mapped %v, size %d; want a mapping charged 0 bytes", tab.Mapped(), tab.Size())
	}
	if tab.Addr != heap.Addr || tab.TextStart != heap.TextStart {
		t.Errorf("mapped table at %#x text %#x, heap copy at %#x text %#x", tab.Addr, tab.TextStart, heap.Addr, heap.TextStart)
	}
	s := NewStore()
	h := s.Holder()
	if _, err := h.Claim("exe", func() (*Table, error) { return tab, nil }); err != nil {
		t.Fatal(err)
	}
	if s.Bytes() != 0 || s.MappedBytes() != int64(len(want)) || h.Charged() != 0 {
		t.Errorf("store: %d heap bytes, %d mapped, %d charged; want 0, %d, 0", s.Bytes(), s.MappedBytes(), h.Charged(), len(want))
	}
	for i := range 2 {
		if !bytes.Equal(tab.Data, want) {
			t.Fatalf("pass %d: mapped bytes differ from the section's", i)
		}
		s.DropPages()
	}
	h.Release("exe")
}
