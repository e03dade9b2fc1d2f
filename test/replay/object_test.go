package replay

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// wholeBelow: an object smaller than this is kept as it is.
const wholeBelow = 512 << 10

// keptSections are the sections of a larger object that unwinding and
// symbolization read, by name prefix: symbol tables, notes (the build
// ID), unwind tables, the Go tables and the ELF's own bookkeeping. Every
// other section is zeroed, its place and size kept, so that program
// headers, load biases and section addresses are the original's; the
// zeros compress to almost nothing.
var keptSections = []string{
	".symtab", ".strtab", ".dynsym", ".dynstr", ".shstrtab", ".note",
	".eh_frame", ".gopclntab", ".go.buildinfo", ".noptrdata", ".gnu_debuglink", ".gnu_debugdata",
	".gnu.version", ".gnu.hash", ".hash", ".dynamic", ".interp",
}

// skeleton returns the object at path as the corpus keeps it, and
// whether it was cut down. An object of wholeBelow bytes or more keeps
// keptSections; its DWARF, which can be tens of megabytes, is zeroed and
// its sections renamed (".debug_info" to "Xdebug_info"), so that the
// symbolizer sees an object without DWARF rather than a corrupt one.
func skeleton(path string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	if len(b) < wholeBelow {
		return b, false, nil
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, false, fmt.Errorf("skeleton of %s: %w", path, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, false, fmt.Errorf("skeleton of %s: only 64-bit little-endian objects", path)
	}
	// e_shoff, e_shentsize and e_shstrndx of the ELF64 header.
	shoff, shentsize, shstrndx := binary.LittleEndian.Uint64(b[0x28:]), uint64(binary.LittleEndian.Uint16(b[0x3a:])), int(binary.LittleEndian.Uint16(b[0x3e:]))
	if shstrndx >= len(f.Sections) {
		return nil, false, fmt.Errorf("skeleton of %s: no section names", path)
	}
	shstr := f.Sections[shstrndx]
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL || kept(s.Name) {
			continue
		}
		end := s.Offset + s.FileSize
		if end > uint64(len(b)) {
			return nil, false, fmt.Errorf("skeleton of %s: section %s past the end", path, s.Name)
		}
		clear(b[s.Offset:end])
		if strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			// sh_name is the first word of the section header.
			name := uint64(binary.LittleEndian.Uint32(b[shoff+uint64(i)*shentsize:]))
			b[shstr.Offset+name] = 'X'
		}
	}
	return b, true, nil
}

func kept(name string) bool {
	for _, k := range keptSections {
		if strings.HasPrefix(name, k) {
			return true
		}
	}
	return false
}

// writeGzip writes b compressed to path.
func writeGzip(path string, b []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// readGzip reads a file writeGzip wrote.
func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// fileVaddrs converts file offsets of an object to the virtual addresses
// its symbols use, through its PT_LOAD segments.
func fileVaddrs(b []byte, offs []uint64) ([]uint64, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []uint64
	for _, off := range offs {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
				out = append(out, off-p.Off+p.Vaddr)
			}
		}
	}
	return out, nil
}

// filterSymtab keeps, of the object's .symtab, the symbols that contain
// one of addrs or are the nearest at or below one (with their aliases at
// the same address), and zeroes the rest and the names no kept symbol
// uses: what a lookup of addrs can return stays, and a symbol table of
// megabytes (libjvm's) shrinks to the few the stacks run through. It
// reports whether the object has a .symtab.
func filterSymtab(b []byte, addrs []uint64) (bool, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false, err
	}
	defer f.Close()
	var symtab *elf.Section
	idx := -1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB {
			symtab, idx = s, i
		}
	}
	if symtab == nil || int(symtab.Link) >= len(f.Sections) {
		return false, nil
	}
	strtab := f.Sections[symtab.Link]
	const entSize = 24 // Elf64_Sym
	n := int(symtab.Size / entSize)
	raw := b[symtab.Offset : symtab.Offset+uint64(n)*entSize]
	type sym struct {
		i           int
		value, size uint64
	}
	var funcs []sym
	for i := 1; i < n; i++ {
		e := raw[i*entSize:]
		shndx := binary.LittleEndian.Uint16(e[6:])
		if shndx == 0 {
			continue
		}
		funcs = append(funcs, sym{i, binary.LittleEndian.Uint64(e[8:]), binary.LittleEndian.Uint64(e[16:])})
	}
	keep := map[int]bool{0: true}
	for _, a := range addrs {
		var best uint64
		found := false
		for _, s := range funcs {
			if s.value <= a && a < s.value+s.size {
				keep[s.i] = true
			}
			if s.value <= a && (!found || s.value > best) {
				best, found = s.value, true
			}
		}
		for _, s := range funcs {
			if found && s.value == best {
				keep[s.i] = true
			}
		}
	}
	kept := make([]byte, 0, len(keep)*entSize)
	locals := 0
	names := make([]byte, strtab.Size)
	strs := b[strtab.Offset : strtab.Offset+strtab.Size]
	for i := 0; i < n; i++ {
		if !keep[i] {
			continue
		}
		e := raw[i*entSize : (i+1)*entSize]
		kept = append(kept, e...)
		if elf.ST_BIND(e[4]) == elf.STB_LOCAL {
			locals++
		}
		name := binary.LittleEndian.Uint32(e)
		if end := bytes.IndexByte(strs[name:], 0); end >= 0 {
			copy(names[name:], strs[name:int(name)+end])
		}
	}
	clear(raw)
	copy(raw, kept)
	copy(strs, names)
	// sh_size and sh_info of the .symtab section header.
	shoff, shentsize := binary.LittleEndian.Uint64(b[0x28:]), uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	hdr := b[shoff+uint64(idx)*shentsize:]
	binary.LittleEndian.PutUint64(hdr[0x20:], uint64(len(kept)))
	binary.LittleEndian.PutUint32(hdr[0x2c:], uint32(locals))
	return true, nil
}

// zeroSections zeroes the named sections' contents.
func zeroSections(b []byte, names ...string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && slices.Contains(names, s.Name) {
			clear(b[s.Offset : s.Offset+s.FileSize])
		}
	}
	return nil
}
