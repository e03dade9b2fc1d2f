// Package proc tracks processes and their executable mappings, so that
// samples can be symbolized even after their process exited.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
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
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		m, exec, err := parseMapsLine(line)
		if err != nil {
			return nil, err
		}
		if exec {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

func parseMapsLine(line []byte) (Mapping, bool, error) {
	// start-end perms offset dev inode   path
	var m Mapping
	fields := bytes.Fields(line)
	if len(fields) < 5 {
		return m, false, fmt.Errorf("parse maps line %q: too few fields", line)
	}
	lo, hi, ok := strings.Cut(string(fields[0]), "-")
	if !ok {
		return m, false, fmt.Errorf("parse maps line %q: bad range", line)
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	perms := fields[1]
	if m.Offset, err = strconv.ParseUint(string(fields[2]), 16, 64); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	m.Dev = string(fields[3])
	if m.Inode, err = strconv.ParseUint(string(fields[4]), 10, 64); err != nil {
		return m, false, fmt.Errorf("parse maps line %q: %w", line, err)
	}
	if len(fields) > 5 {
		// The path may contain spaces; take the rest of the line after
		// the inode column.
		idx := bytes.Index(line, fields[5])
		m.Path = string(bytes.TrimRight(line[idx:], " "))
	}
	return m, len(perms) >= 3 && perms[2] == 'x', nil
}
