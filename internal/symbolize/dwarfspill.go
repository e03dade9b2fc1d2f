package symbolize

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// A spill file holds the decompressed DWARF sections of one debug file
// version, so that loading them again after a trim is a read instead of
// inflating them again (libc's: 55 ms of CPU each time a report meets a
// compile unit not seen before). Its layout: spillMagic, then per section
// a name length byte, the name, a little-endian uint64 size and the data.
const spillMagic = "spanprof-dwarf-1\n"

// spillName names the spill file of the file at path, version st.
func spillName(path string, st fileStat) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d %d %d %d", path, st.dev, st.ino, st.size, st.mtime)
	return hex.EncodeToString(h.Sum(nil)[:16]) + ".dwarf"
}

// writeSpill writes secs to dir/name through a temporary file, then
// keeps dir within maxBytes by removing the least recently used spill
// files (their modification time is touched on use).
func writeSpill(dir, name string, secs *sections, maxBytes int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	w.WriteString(spillMagic)
	names := make([]string, 0, len(secs.m))
	for n := range secs.m {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := secs.m[n]
		w.WriteByte(byte(len(n)))
		w.WriteString(n)
		w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	trimSpillDir(dir, maxBytes)
	return nil
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

// readSpill reads the sections back from a spill file.
func readSpill(path string) (*sections, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(f)
	magic := make([]byte, len(spillMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != spillMagic {
		return nil, fmt.Errorf("read spill file %s: not a spill file", path)
	}
	secs := &sections{m: map[string][]byte{}}
	left := fi.Size() - int64(len(spillMagic))
	for {
		n, err := r.ReadByte()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read spill file %s: %w", path, err)
		}
		hdr := make([]byte, int(n)+8)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return nil, fmt.Errorf("read spill file %s: %w", path, err)
		}
		size := binary.LittleEndian.Uint64(hdr[n:])
		left -= int64(len(hdr)) + 1
		if size > uint64(left) {
			return nil, fmt.Errorf("read spill file %s: section of %d bytes past the end", path, size)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("read spill file %s: %w", path, err)
		}
		left -= int64(size)
		secs.m[string(hdr[:n])] = b
		secs.bytes += len(b)
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // recently used: trimSpillDir keeps it
	return secs, nil
}
