package tracectx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unsafe"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, off uint64
	perms, dev      string
	inode           uint64
	path            string
}

// ReadMaps returns the text of /proc/PID/maps, for a ProcRead.
func ReadMaps(pid int) ([]byte, error) {
	b, err := readProcFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("open process maps: %w", err)
	}
	return b, nil
}

func readMaps(pid int) ([]mapping, error) {
	b, err := readProcFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("open process maps: %w", err)
	}
	return parseMapsText(b)
}

func parseMaps(r io.Reader) ([]mapping, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read process maps: %w", err)
	}
	return parseMapsText(b)
}

// maxMapsLine bounds one maps line (a path is at most PATH_MAX, 4096).
const maxMapsLine = 1 << 20

// parseMapsText parses maps text in memory: lines split at '\n' (a '\r'
// before it dropped), fields at single spaces, the sixth the rest of the
// line. Only the strings kept allocate, and the common permissions and
// devices are shared: every new process is scanned, and most of a
// process's lines are anonymous memory.
func parseMapsText(b []byte) ([]mapping, error) {
	var out []mapping
	var dev string
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		if len(line) > maxMapsLine {
			return nil, fmt.Errorf("read process maps: line longer than %d bytes", maxMapsLine)
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		var f [6][]byte
		n, rem := 0, line
		for ; n < 5; n++ {
			i := bytes.IndexByte(rem, ' ')
			if i < 0 {
				break
			}
			f[n], rem = rem[:i], rem[i+1:]
		}
		f[n] = rem
		if n++; n < 5 {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
		if !ok {
			return nil, fmt.Errorf("parse maps line %q: no address range", line)
		}
		var m mapping
		var errs [4]error
		m.start, errs[0] = parseHex(lo, 16)
		m.end, errs[1] = parseHex(hi, 16)
		m.off, errs[2] = parseHex(f[2], 16)
		m.inode, errs[3] = parseHex(f[4], 10)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		m.perms = perms(f[1])
		if string(f[3]) != dev {
			dev = string(f[3])
		}
		m.dev = dev
		if n == 6 {
			if p := bytes.TrimLeft(f[5], " "); len(p) > 0 {
				m.path = string(p)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// parseHex parses a maps number in base without copying it out of the
// line, with strconv's errors.
func parseHex(b []byte, base int) (uint64, error) {
	if len(b) == 0 {
		return strconv.ParseUint("", base, 64)
	}
	return strconv.ParseUint(unsafe.String(&b[0], len(b)), base, 64)
}

// perms returns the permission column, a shared string for the usual ones.
func perms(b []byte) string {
	for _, p := range [...]string{"r--p", "r-xp", "rw-p", "---p", "rwxp", "r--s", "rw-s", "r-xs", "rwxs"} {
		if string(b) == p {
			return p
		}
	}
	return string(b)
}
