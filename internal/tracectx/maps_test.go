package tracectx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseMapsLines: the in-memory maps parser gives what the line
// scanner it replaced gave (parseMapsLines below), for any text.
func FuzzParseMapsLines(f *testing.F) {
	f.Add("55d0c0a00000-55d0c0a02000 r-xp 00000000 fe:01 1234   /usr/bin/demo\n7f00-7f01 rw-p 0 00:00 0 /memfd:OTEL_CTX (deleted)\n")
	f.Add("1-2 r 3 4 5\r\n\n1-2 r 3 4 5 \n1-2  3 4 5 6\n-\nx")
	f.Add("7f1000000000-7f1000001000 rw-p 00000000 00:00 0 \n7ffd0-7ffd1 rw-p 0 00:00 0          [stack]")
	f.Fuzz(func(t *testing.T, text string) {
		got, gerr := parseMapsText([]byte(text))
		want, werr := parseMapsLines(strings.NewReader(text))
		if (gerr == nil) != (werr == nil) || !slices.Equal(got, want) {
			t.Fatalf("parseMapsText = %+v, %v; the line scanner = %+v, %v", got, gerr, want, werr)
		}
	})
}

// parseMapsLines is the scanner's maps parser before parseMapsText: the
// reference it is held to.
func parseMapsLines(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("parse maps line %q: no address range", sc.Text())
		}
		var m mapping
		var errs [4]error
		m.start, errs[0] = strconv.ParseUint(lo, 16, 64)
		m.end, errs[1] = strconv.ParseUint(hi, 16, 64)
		m.off, errs[2] = strconv.ParseUint(fields[2], 16, 64)
		m.inode, errs[3] = strconv.ParseUint(fields[4], 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", sc.Text(), err)
		}
		m.perms, m.dev = fields[1], fields[3]
		if len(fields) == 6 {
			m.path = strings.TrimLeft(fields[5], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read process maps: %w", err)
	}
	return out, nil
}

func TestReadProcFile(t *testing.T) {
	for _, size := range []int{0, 1, 4095, 4096, 4097, 70000} {
		path := filepath.Join(t.TempDir(), "f")
		want := bytes.Repeat([]byte{'x', 0, 'y'}, size)[:size]
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readProcFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("size %d: read %d bytes (%v)", size, len(got), err)
		}
	}
	if _, err := readProcFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want not-exist", err)
	}
}
