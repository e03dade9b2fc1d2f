package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"
)

// noSectionsELF is an ELF64 executable without section headers whose one
// read-only PT_LOAD claims filesz bytes (sstrip'd or hostile files).
func noSectionsELF(filesz uint64) []byte {
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: 1,
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.Write(&b, binary.LittleEndian, hdr)
	binary.Write(&b, binary.LittleEndian, elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: 0, Vaddr: 0x400000,
		Filesz: filesz, Memsz: filesz, Align: 0x1000,
	})
	b.Write(make([]byte, 64))
	return b.Bytes()
}

// TestReliabilityPclntabHugeSegment: a segment header claiming more bytes
// than the file holds must not be allocated (it panicked with "makeslice:
// len out of range", or allocated gigabytes, before the fix).
func TestReliabilityPclntabHugeSegment(t *testing.T) {
	for _, size := range []uint64{1 << 62, 1 << 34, 200} {
		ef, err := elf.NewFile(bytes.NewReader(noSectionsELF(size)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Find(ef); err == nil {
			t.Errorf("filesz %d: found a pclntab in an empty file", size)
		}
	}
}
