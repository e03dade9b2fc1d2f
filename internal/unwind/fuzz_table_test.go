package unwind

import (
	"bytes"
	"debug/elf"
	"testing"
)

// Unwind tables come from any file a sampled process maps: building one
// and asking it for rules must never panic or hang.

func FuzzUnwindTable(f *testing.F) {
	// Seeds in testdata/fuzz: fixture objects without DWARF.
	f.Add([]byte("\x7fELF\x02\x01\x01"), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		tab, err := NewTable(ef)
		if err != nil {
			return
		}
		pcs := []uint64{pc}
		for _, s := range ef.Sections {
			if s.Flags&elf.SHF_EXECINSTR != 0 {
				pcs = append(pcs, s.Addr, s.Addr+s.Size/2)
			}
		}
		stack := make([]byte, 256)
		for _, p := range pcs {
			r, err := tab.RuleAt(p)
			if err != nil {
				continue
			}
			_, _ = RecoverCaller(r, 0x7ff000, stack)
		}
	})
}
