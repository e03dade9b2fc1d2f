package symbolize

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A spill file holds the decompressed DWARF sections of one debug file
// version, written once as they are inflated. Lookups then read just the
// bytes of a unit (its entries, abbreviations and line program) from it,
// instead of holding the sections or inflating them again after a trim
// (libc's: 8.5 MB, 55 ms of CPU). Its layout: spillMagic, then per
// section a name length byte, the name, a little-endian uint64 size and
// the data.
const spillMagic = "spanprof-dwarf-1\n"

// spillName names the spill file of the file at path, version st.
func spillName(path string, st fileStat) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d %d %d %d", path, st.dev, st.ino, st.size, st.mtime)
	return hex.EncodeToString(h.Sum(nil)[:16]) + ".dwarf"
}

// dwarfSectionOf returns the dwarfSections name of s, if it is one.
func dwarfSectionOf(s *elf.Section) (string, bool) {
	name, ok := strings.CutPrefix(s.Name, ".debug_")
	if !ok {
		name, ok = strings.CutPrefix(s.Name, ".zdebug_")
	}
	if !ok || !slices.Contains(dwarfSections, name) || s.Type == elf.SHT_NOBITS {
		return "", false
	}
	return name, true
}

// compressedDWARF reports whether any DWARF section of ef is compressed:
// only then is a spill file worth its disk space.
func compressedDWARF(ef *elf.File) bool {
	for _, s := range ef.Sections {
		if _, ok := dwarfSectionOf(s); ok && (s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_")) {
			return true
		}
	}
	return false
}

// writeSpill inflates the DWARF sections of ef into dir/name, streaming,
// through a temporary file; then it keeps dir within maxBytes by
// removing the least recently used spill files.
func writeSpill(ef *elf.File, dir, name string, maxBytes int64) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := writeSections(tmp, ef); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	trimSpillDir(dir, maxBytes)
	return path, nil
}

func writeSections(f *os.File, ef *elf.File) error {
	w := bufio.NewWriter(f)
	w.WriteString(spillMagic)
	pos := int64(len(spillMagic))
	for _, s := range ef.Sections {
		name, ok := dwarfSectionOf(s)
		if !ok {
			continue
		}
		w.WriteByte(byte(len(name)))
		w.WriteString(name)
		w.Write(make([]byte, 8)) // the size, once known
		sizeAt := pos + 1 + int64(len(name))
		n, err := io.Copy(w, s.Open())
		if err != nil {
			return fmt.Errorf("inflate %s: %w", s.Name, err)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if _, err := f.WriteAt(binary.LittleEndian.AppendUint64(nil, uint64(n)), sizeAt); err != nil {
			return err
		}
		pos = sizeAt + 8 + n
	}
	return w.Flush()
}

// trimSpillDir removes the oldest spill files while dir holds more than
// maxBytes of them.
func trimSpillDir(dir string, maxBytes int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		mod  int64
	}
	var files []file
	var total int64
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".dwarf" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{filepath.Join(dir, e.Name()), fi.Size(), fi.ModTime().UnixNano()})
		total += fi.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(a.mod, b.mod) })
	for _, f := range files {
		if total <= maxBytes {
			return
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}

// spillSource reads sections from an open spill file.
type spillSource struct {
	f    *os.File
	secs map[string]spillSection
}

type spillSection struct{ off, size int64 }

// openSpill opens a spill file and reads where its sections are.
func openSpill(path string) (*spillSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s, err := indexSpill(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read spill file %s: %w", path, err)
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // recently used: trimSpillDir keeps it
	return s, nil
}

func indexSpill(f *os.File) (*spillSource, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	magic := make([]byte, len(spillMagic))
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != spillMagic {
		return nil, errors.New("not a spill file")
	}
	s := &spillSource{f: f, secs: map[string]spillSection{}}
	pos := int64(len(spillMagic))
	for pos < fi.Size() {
		var n [1]byte
		if _, err := f.ReadAt(n[:], pos); err != nil {
			return nil, err
		}
		hdr := make([]byte, int(n[0])+8)
		if _, err := f.ReadAt(hdr, pos+1); err != nil {
			return nil, fmt.Errorf("section header at %d: %w", pos, err)
		}
		size := int64(binary.LittleEndian.Uint64(hdr[n[0]:]))
		off := pos + 1 + int64(len(hdr))
		if size < 0 || size > fi.Size()-off {
			return nil, fmt.Errorf("section of %d bytes at %d past the end", size, off)
		}
		s.secs[string(hdr[:n[0]])] = spillSection{off: off, size: size}
		pos = off + size
	}
	return s, nil
}

func (s *spillSource) read(name string, off, n int) ([]byte, error) {
	sec := s.secs[name]
	if off < 0 || n < 0 || int64(off) > sec.size || int64(n) > sec.size-int64(off) {
		return nil, fmt.Errorf("read %s: %d bytes at %d of %d: %w", name, n, off, sec.size, errSectionRange)
	}
	b := make([]byte, n)
	if _, err := s.f.ReadAt(b, sec.off+int64(off)); err != nil {
		return nil, fmt.Errorf("read %s from the spill file: %w", name, err)
	}
	return b, nil
}

func (s *spillSource) size(name string) int { return int(s.secs[name].size) }

func (s *spillSource) close() { s.f.Close() }

// memSource reads sections held in memory.
type memSource struct{ s *sections }

func (m memSource) read(name string, off, n int) ([]byte, error) {
	b := m.s.m[name]
	if off < 0 || n < 0 || off > len(b) || n > len(b)-off {
		return nil, fmt.Errorf("read %s: %d bytes at %d of %d: %w", name, n, off, len(b), errSectionRange)
	}
	return b[off : off+n : off+n], nil
}

func (m memSource) size(name string) int { return len(m.s.m[name]) }

// close releases the touched pages of the mapped sections; the mappings
// go with the last reference to the sections.
func (m memSource) close() {
	for _, s := range m.s.maps {
		s.DropPages()
	}
}

// errSectionRange: an offset or length in DWARF points outside its section.
var errSectionRange = errors.New("outside the section")
