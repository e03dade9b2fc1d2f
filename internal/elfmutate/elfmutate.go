// Package elfmutate makes deterministic corruptions of ELF files, for the
// tests of every reader of untrusted binaries (symbolize, unwind,
// tracectx). The Go fuzzer runs large ELF inputs at a few executions a
// second on small machines; these fixed corruptions cover the header paths
// in every test run.
package elfmutate

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mutations returns n corruptions of an ELF file: random bytes, fields of
// the ELF header and of the program and section headers set to 0, all ones
// or huge values, and section headers dropped (as sstrip does). The same
// seed always gives the same corruptions.
func Mutations(seed []byte, n int) [][]byte {
	r := rand.New(rand.NewSource(int64(len(seed))))
	vals := []uint64{0, 1, 0xff, 0x7fffffff, 0xffffffff, 1 << 40, 1<<63 - 1, ^uint64(0)}
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		d := append([]byte(nil), seed...)
		if len(d) < 64 {
			out = append(out, d)
			continue
		}
		phoff := binary.LittleEndian.Uint64(d[32:])
		shoff := binary.LittleEndian.Uint64(d[40:])
		for k := 0; k < 1+r.Intn(4); k++ {
			var base uint64
			switch r.Intn(4) {
			case 0: // ELF header
			case 1:
				base = phoff + uint64(r.Intn(8))*56
			case 2:
				base = shoff + uint64(r.Intn(32))*64
			case 3:
				base = uint64(r.Intn(len(d)))
			}
			at := base + uint64(r.Intn(56))&^7
			if at+8 > uint64(len(d)) {
				continue
			}
			if r.Intn(3) == 0 {
				d[at] ^= byte(1 + r.Intn(255))
			} else {
				binary.LittleEndian.PutUint64(d[at:], vals[r.Intn(len(vals))])
			}
		}
		if r.Intn(8) == 0 { // drop the section headers (sstrip)
			binary.LittleEndian.PutUint64(d[40:], 0)
			binary.LittleEndian.PutUint16(d[60:], 0)
		}
		out = append(out, d)
	}
	return out
}

// CorpusSeeds reads the []byte seeds of a fuzz target's corpus under
// dir/testdata/fuzz/target (go test's corpus file format).
func CorpusSeeds(dir, target string) ([][]byte, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "testdata", "fuzz", target, "*"))
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		lines := strings.SplitN(string(b), "\n", 3)
		if len(lines) < 2 {
			continue
		}
		lit, ok := strings.CutPrefix(lines[1], "[]byte(")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			return nil, fmt.Errorf("read seed %s: %w", f, err)
		}
		out = append(out, []byte(s))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no seeds in %s", filepath.Join(dir, "testdata", "fuzz", target))
	}
	return out, nil
}
