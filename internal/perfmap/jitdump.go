package perfmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// A jitdump file (/tmp/jit-PID.dump) is the binary format perf's
// "perf inject --jit" reads: a header, then records each starting with
// its id and total size. JITs that write only a jitdump (CPython 3.13
// -X perf_jit) mmap it executable so that perf notices it; spanprof reads
// it beside the perf map, with the code addresses and names of its
// JIT_CODE_LOAD records and the moves of JIT_CODE_MOVE.
const (
	jitdumpMagic   = 0x4A695444 // "JiTD"
	jitdumpVersion = 1
	jitdumpHeader  = 40 // magic, version, total_size, elf_mach, pad1, pid, timestamp, flags
	jitRecordHead  = 16 // id, total_size, timestamp

	jitCodeLoad  = 0
	jitCodeMove  = 1
	jitCodeClose = 3

	jitLoadFixed = jitRecordHead + 40 // pid, tid, vma, code_addr, code_size, code_index
	jitMoveSize  = jitRecordHead + 48 // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index
)

// ErrJITDump marks a jitdump file that is not one or is damaged.
var ErrJITDump = errors.New("malformed jitdump")

// ParseJITDump reads a jitdump file's content. A bad header (magic,
// version, size) is an error and no table; a malformed record ends the
// file there with an error wrapping ErrJITDump, and the table holds the
// records before it. A last record cut short is the writer's next one,
// not yet whole: it is left for the next read, without an error. Records
// other than code loads and moves (debug and unwinding information) are
// skipped by their size.
func ParseJITDump(b []byte) (*Table, error) {
	if len(b) < jitdumpHeader {
		return nil, fmt.Errorf("read jitdump header: %d bytes: %w", len(b), ErrJITDump)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case jitdumpMagic:
	case 0x4454694A: // written on a big-endian machine
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("read jitdump header: magic %#x: %w", binary.LittleEndian.Uint32(b), ErrJITDump)
	}
	if v := bo.Uint32(b[4:]); v != jitdumpVersion {
		return nil, fmt.Errorf("read jitdump header: version %d, want %d: %w", v, jitdumpVersion, ErrJITDump)
	}
	hsize := uint64(bo.Uint32(b[8:]))
	if hsize < jitdumpHeader || hsize > uint64(len(b)) {
		return nil, fmt.Errorf("read jitdump header: size %d: %w", hsize, ErrJITDump)
	}
	var syms []Symbol
	add := func(s Symbol) {
		s.seq = len(syms)
		syms = append(syms, s)
	}
	var err error
	for off := hsize; off+jitRecordHead <= uint64(len(b)); {
		id, size := bo.Uint32(b[off:]), uint64(bo.Uint32(b[off+4:]))
		if size < jitRecordHead {
			err = fmt.Errorf("read jitdump record at %d: size %d: %w", off, size, ErrJITDump)
			break
		}
		if off+size > uint64(len(b)) {
			break // being written
		}
		rec := b[off : off+size]
		off += size
		switch id {
		case jitCodeLoad:
			if size < jitLoadFixed+1 {
				err = fmt.Errorf("read jitdump code load: size %d: %w", size, ErrJITDump)
				break
			}
			addr, n := bo.Uint64(rec[jitRecordHead+16:]), bo.Uint64(rec[jitRecordHead+24:])
			name := rec[jitLoadFixed:]
			end := bytes.IndexByte(name, 0)
			if end < 0 || n == 0 || addr+n < addr {
				err = fmt.Errorf("read jitdump code load at %#x: %w", addr, ErrJITDump)
				break
			}
			if nm := strings.TrimSpace(string(name[:end])); nm != "" {
				add(Symbol{Start: addr, End: addr + n, Name: nm})
			}
		case jitCodeMove:
			if size < jitMoveSize {
				err = fmt.Errorf("read jitdump code move: size %d: %w", size, ErrJITDump)
				break
			}
			from, to, n := bo.Uint64(rec[jitRecordHead+16:]), bo.Uint64(rec[jitRecordHead+24:]), bo.Uint64(rec[jitRecordHead+32:])
			for i := len(syms) - 1; i >= 0; i-- {
				if syms[i].Start == from {
					if n != 0 && to+n >= to {
						add(Symbol{Start: to, End: to + n, Name: syms[i].Name})
					}
					break
				}
			}
		case jitCodeClose:
			off = uint64(len(b))
		}
		if err != nil {
			break
		}
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Start < syms[j].Start })
	return &Table{syms: syms}, err
}
