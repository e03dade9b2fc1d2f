package symbolize

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// Identity names the content of an ELF file independently of where it is
// mapped, so that one parse serves every process that maps the same file.
type Identity struct {
	// BuildID is the GNU build ID in lowercase hex; empty when the file has
	// no NT_GNU_BUILD_ID note.
	BuildID string
	// HTLHash is set only when BuildID is empty; see HTLHash.
	HTLHash string
}

// Key returns the cache key of the identity: the build ID when there is
// one, else the content hash.
func (id Identity) Key() string {
	if id.BuildID != "" {
		return "gnu:" + id.BuildID
	}
	return "htl:" + id.HTLHash
}

// htlChunk is the size of the head and tail hashed by HTLHash.
const htlChunk = 4096

// HTLHash computes the identity of a file without a GNU build ID
// (exported as process.executable.build_id.htlhash): SHA-256 over the
// first 4 KiB, the last 4 KiB and the file size as 8 little-endian bytes,
// truncated to 16 bytes and written as 32 lowercase hex digits. Head and
// tail overlap for files under 8 KiB. Reading two pages keeps it cheap on
// large binaries while still telling apart rebuilds, whose ELF header,
// program headers and section header table (at the tail) differ.
func HTLHash(r io.ReaderAt, size int64) (string, error) {
	h := sha256.New()
	head := make([]byte, min(size, htlChunk))
	if _, err := r.ReadAt(head, 0); err != nil && err != io.EOF {
		return "", fmt.Errorf("read file head: %w", err)
	}
	h.Write(head)
	tail := make([]byte, min(size, htlChunk))
	if _, err := r.ReadAt(tail, size-int64(len(tail))); err != nil && err != io.EOF {
		return "", fmt.Errorf("read file tail: %w", err)
	}
	h.Write(tail)
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(size))
	h.Write(sz[:])
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// ntGNUBuildID is the note type of the GNU build ID.
const ntGNUBuildID = 3

// BuildID returns the GNU build ID of f in lowercase hex, or "" if it has
// none. Program headers are tried first because section headers may be
// stripped from a binary that still carries the note.
func BuildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if id := findBuildID(p.Open(), f.ByteOrder); id != "" {
			return id
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		if id := findBuildID(s.Open(), f.ByteOrder); id != "" {
			return id
		}
	}
	return ""
}

// findBuildID walks the notes of one PT_NOTE segment or SHT_NOTE section.
func findBuildID(r io.Reader, bo binary.ByteOrder) string {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil && len(data) == 0 {
		return ""
	}
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		typ := bo.Uint32(data[8:])
		data = data[12:]
		nameEnd := (namesz + 3) &^ 3
		descEnd := nameEnd + (descsz+3)&^3
		if uint64(len(data)) < nameEnd+descsz {
			return ""
		}
		name := data[:namesz]
		if typ == ntGNUBuildID && bytes.Equal(name, []byte("GNU\x00")) && descsz > 0 {
			return hex.EncodeToString(data[nameEnd : nameEnd+descsz])
		}
		if uint64(len(data)) < descEnd {
			return ""
		}
		data = data[descEnd:]
	}
	return ""
}

// Identify returns the identity of the ELF file at path: its build ID, or
// its HTLHash when it has none.
func Identify(path string) (Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return Identity{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Identity{}, fmt.Errorf("stat %s: %w", path, err)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return Identity{}, fmt.Errorf("parse elf %s: %w", path, err)
	}
	return identify(ef, f, st.Size())
}

func identify(ef *elf.File, r io.ReaderAt, size int64) (Identity, error) {
	if id := BuildID(ef); id != "" {
		return Identity{BuildID: id}, nil
	}
	h, err := HTLHash(r, size)
	if err != nil {
		return Identity{}, err
	}
	return Identity{HTLHash: h}, nil
}
