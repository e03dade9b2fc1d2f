// Package proc tracks processes and their executable mappings, so that
// samples can be symbolized even after their process exited.
package proc

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unsafe"
)

// Mapping is one executable region of a process's address space.
type Mapping struct {
	Start, End, Offset uint64
	Dev                string
	Inode              uint64
	// Path is the file as the process sees it; special regions keep their
	// bracketed name ("[vdso]") and anonymous ones are empty.
	Path string
}

// Anonymous reports whether no file backs the mapping (JIT code, [vdso]).
func (m *Mapping) Anonymous() bool {
	return m.Inode == 0
}

// ParseMaps reads /proc/PID/maps text and keeps the executable mappings.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return parseMaps(b)
}

// parseMaps parses maps text held in memory. Only the executable mappings
// are kept, and only they allocate: under process churn the tracker reads
// thousands of maps a second, most of whose lines are data.
func parseMaps(b []byte) ([]Mapping, error) {
	var out []Mapping
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		m, exec, err := parseMapsLine(line)
		if err != nil {
			return nil, err
		}
		if exec {
			out = append(out, m)
		}
	}
	return out, nil
}

func parseMapsLine(line []byte) (Mapping, bool, error) {
	// start-end perms offset dev inode   path
	var m Mapping
	var f [5][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " \t")
		end := bytes.IndexAny(rest, " \t")
		if end < 0 {
			end = len(rest)
		}
		f[i], rest = rest[:end], rest[end:]
		if len(f[i]) == 0 {
			return m, false, fmt.Errorf("parse maps line %q: too few fields", line)
		}
	}
	lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
	if !ok {
		return m, false, fmt.Errorf("parse maps line %q: bad range", line)
	}
	var err error
	if m.Start, err = parseUint(lo, 16); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.End, err = parseUint(hi, 16); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.Offset, err = parseUint(f[2], 16); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.Inode, err = parseUint(f[4], 10); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	perms := f[1]
	if len(perms) < 3 || perms[2] != 'x' {
		return m, false, nil
	}
	m.Dev = string(f[3])
	// The path may contain spaces; it is the rest of the line after the
	// inode column.
	if path := bytes.TrimRight(bytes.TrimLeft(rest, " \t"), " "); len(path) > 0 {
		m.Path = string(path)
	}
	return m, true, nil
}

// parseUint parses a maps column without copying it into a string
// (strconv copies the text into the errors it returns).
func parseUint(b []byte, base int) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty number")
	}
	return strconv.ParseUint(unsafe.String(&b[0], len(b)), base, 64)
}
