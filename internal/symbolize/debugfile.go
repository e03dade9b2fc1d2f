package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Reasons a candidate debug file is refused. They are counted (Stats) and
// never turn into symbols: a debug file of another build would name the
// wrong functions, which is worse than naming none.
var (
	// ErrDebugBuildID: the file's build ID differs from the binary's.
	ErrDebugBuildID = errors.New("debug file build ID mismatch")
	// ErrDebugCRC: the file's CRC32 differs from the one in .gnu_debuglink.
	ErrDebugCRC = errors.New("debug file CRC32 mismatch")
	// ErrDebugCorrupt: the file is not a readable ELF file with symbols or
	// DWARF (truncated, overwritten, garbage from a server).
	ErrDebugCorrupt = errors.New("debug file corrupt")
)

// debugCandidate is one place a separate debug file may be.
type debugCandidate struct {
	path string
	// crc is the CRC32 .gnu_debuglink demands; checked when hasCRC.
	crc    uint32
	hasCRC bool
}

// debugCandidates lists where the debug file of a stripped binary may be,
// the way gdb searches: by build ID under <dir>/.build-id/xx/rest.debug,
// then by .gnu_debuglink next to the file, in its .debug directory and
// under <dir>/<original directory>.
func debugCandidates(ef *elf.File, id Identity, openPath, displayPath string, debugDirs []string) []debugCandidate {
	var cands []debugCandidate
	if len(id.BuildID) > 2 {
		for _, d := range debugDirs {
			cands = append(cands, debugCandidate{path: filepath.Join(d, ".build-id", id.BuildID[:2], id.BuildID[2:]+".debug")})
		}
	}
	if link, crc, ok := debugLink(ef); ok {
		dirs := []string{filepath.Dir(openPath), filepath.Join(filepath.Dir(openPath), ".debug")}
		if displayPath != openPath && filepath.IsAbs(displayPath) {
			dirs = append(dirs, filepath.Dir(displayPath), filepath.Join(filepath.Dir(displayPath), ".debug"))
		}
		for _, d := range debugDirs {
			dirs = append(dirs, filepath.Join(d, filepath.Dir(displayPath)))
		}
		for _, d := range dirs {
			cands = append(cands, debugCandidate{path: filepath.Join(d, link), crc: crc, hasCRC: true})
		}
	}
	return cands
}

// openDebugFile opens and checks one candidate. A missing file returns an
// error wrapping fs.ErrNotExist, which callers do not count.
func openDebugFile(c debugCandidate, id Identity) (*elf.File, error) {
	fi, err := os.Stat(c.path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("open debug file %s: not a regular file: %w", c.path, fs.ErrNotExist)
	}
	if c.hasCRC {
		got, err := fileCRC(c.path)
		if err != nil {
			return nil, err
		}
		if got != c.crc {
			return nil, fmt.Errorf("check %s: crc %08x, debuglink wants %08x: %w", c.path, got, c.crc, ErrDebugCRC)
		}
	}
	ef, err := elf.Open(c.path)
	if err != nil {
		return nil, fmt.Errorf("parse debug file %s: %v: %w", c.path, err, ErrDebugCorrupt)
	}
	if err := checkDebugFile(ef, id, fi.Size()); err != nil {
		ef.Close()
		return nil, fmt.Errorf("check %s: %w", c.path, err)
	}
	return ef, nil
}

// fileCRC is the CRC32 (IEEE, as gdb and objcopy compute it) of a file.
func fileCRC(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("read debug file %s: %w", path, err)
	}
	return h.Sum32(), nil
}

// checkDebugFile verifies that ef belongs to the binary of identity id and
// that its tables are whole, so a truncated file is refused before any
// lookup trusts it. size is the file's size. The symbol table is read;
// the DWARF sections are only checked to lie within the file and to start
// with a readable stream: decompressing them here would double the cost
// of the first load (libc's are 10 MB), and a unit that fails to read
// later is counted (Stats.DWARFErrors) and answers nothing.
func checkDebugFile(ef *elf.File, id Identity, size int64) error {
	if id.BuildID != "" {
		if got := BuildID(ef); got != "" && got != id.BuildID {
			return fmt.Errorf("build ID %s, want %s: %w", got, id.BuildID, ErrDebugBuildID)
		}
	}
	n := 0
	for _, name := range []string{".symtab", ".debug_info", ".debug_line"} {
		s := ef.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		n++
		if s.Offset > uint64(size) || s.FileSize > uint64(size)-s.Offset {
			return fmt.Errorf("read %s: %d bytes at %d past the end of the file (%d bytes): %w",
				name, s.FileSize, s.Offset, size, ErrDebugCorrupt)
		}
		var b [1]byte
		if _, err := io.ReadFull(s.Open(), b[:]); err != nil && s.Size > 0 {
			return fmt.Errorf("read %s: %v: %w", name, err, ErrDebugCorrupt)
		}
	}
	if n == 0 {
		return fmt.Errorf("no symbol table or DWARF: %w", ErrDebugCorrupt)
	}
	if ef.Section(".symtab") != nil {
		if _, err := ef.Symbols(); err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("read symbols: %v: %w", err, ErrDebugCorrupt)
		}
	}
	return nil
}

// debugLink returns the file name and CRC32 stored in .gnu_debuglink: the
// name, NUL-padded to 4 bytes, then the CRC in the file's byte order.
func debugLink(ef *elf.File) (name string, crc uint32, ok bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil {
		return "", 0, false
	}
	d, err := s.Data()
	if err != nil {
		return "", 0, false
	}
	i := strings.IndexByte(string(d), 0)
	if i <= 0 {
		return "", 0, false
	}
	off := (i + 4) &^ 3
	if off+4 > len(d) {
		return "", 0, false
	}
	name = string(d[:i])
	if strings.Contains(name, "/") {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(d[off:]), true
}
