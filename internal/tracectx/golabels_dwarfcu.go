package tracectx

import (
	"bufio"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"syscall"
)

// The Go linker writes the DWARF of every type (runtime.g, runtime.m, the
// label set) into the compilation unit of package runtime, and refers to
// types by DW_FORM_ref_addr, an offset into the whole .debug_info. Reading
// the whole DWARF (elf.File.DWARF) decompresses every debug section onto
// the heap: 150 MB for a 115 MB binary, for a dozen offsets. goRuntimeUnit
// decompresses .debug_info as a stream instead, keeps only that unit, and
// places it at its own offset in an anonymous mapping so that the
// section-relative references still resolve: the pages before it, never
// written, take no memory.

// maxRuntimeUnit bounds the runtime unit read (a few MiB in the largest
// services): a bigger claim is taken for a corrupt file.
const maxRuntimeUnit = 256 << 20

// runtimeDWARF is the runtime unit of a Go binary's DWARF, read as above.
type runtimeDWARF struct {
	data  *dwarf.Data
	start dwarf.Offset // the unit's first entry in .debug_info
	mem   []byte       // the mapping; nil once closed
}

// close unmaps the unit. Types read from data copy their names, so they
// stay valid; data must not be used again.
func (r *runtimeDWARF) close() {
	if r.mem != nil {
		_ = syscall.Munmap(r.mem)
		r.mem = nil
	}
}

// goRuntimeUnits calls visit with each compilation unit of f's DWARF
// named runtime, in order, until visit says it is done: the runtime's
// functions and assembly come in small units of that name, its types in
// one large one. Errors wrap errNoGoDWARF: the caller falls back to the
// table.
func goRuntimeUnits(f *elf.File, visit func(*runtimeDWARF) (done bool, err error)) error {
	info, abbrevSec := f.Section(".debug_info"), f.Section(".debug_abbrev")
	if info == nil || abbrevSec == nil {
		return fmt.Errorf("find .debug_info: %w", errNoGoDWARF)
	}
	var secs [3][]byte // abbrev, str, addr
	for i, s := range []*elf.Section{abbrevSec, f.Section(".debug_str"), f.Section(".debug_addr")} {
		if s == nil {
			continue
		}
		if s.Size > maxRuntimeUnit {
			return fmt.Errorf("%s of %d bytes: %w", s.Name, s.Size, errNoGoDWARF)
		}
		var err error
		if secs[i], err = s.Data(); err != nil {
			return fmt.Errorf("read %s: %w: %w", s.Name, errNoGoDWARF, err)
		}
	}
	abbrev, str, addr := secs[0], secs[1], secs[2]
	r := bufio.NewReaderSize(info.Open(), 64<<10)
	for off := uint64(0); off < info.Size; {
		hdr, body, err := readUnitHead(r)
		if err != nil {
			return fmt.Errorf("read unit at %#x: %w: %w", off, errNoGoDWARF, err)
		}
		total := uint64(len(hdr)) + body
		head := make([]byte, min(body, 4096))
		if _, err := io.ReadFull(r, head); err != nil {
			return fmt.Errorf("read unit at %#x: %w: %w", off, errNoGoDWARF, err)
		}
		if unitName(hdr, head, abbrev, str) != "runtime" {
			if _, err := r.Discard(int(body - uint64(len(head)))); err != nil {
				return fmt.Errorf("skip unit at %#x: %w: %w", off, errNoGoDWARF, err)
			}
			off += total
			continue
		}
		if body > maxRuntimeUnit {
			return fmt.Errorf("runtime unit of %d bytes: %w", body, errNoGoDWARF)
		}
		rd, err := mapRuntimeUnit(r, off, hdr, head, body, abbrev, str, addr)
		if err != nil {
			return err
		}
		done, err := visit(rd)
		rd.close()
		if done || err != nil {
			return err
		}
		off += total
	}
	return nil
}

// readUnitHead reads a unit's length field; body is the length that
// follows it.
func readUnitHead(r io.Reader) (hdr []byte, body uint64, err error) {
	hdr = make([]byte, 4, 12)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, 0, err
	}
	body = uint64(binary.LittleEndian.Uint32(hdr))
	if body == 0xffffffff {
		hdr = hdr[:12]
		if _, err := io.ReadFull(r, hdr[4:]); err != nil {
			return nil, 0, err
		}
		body = binary.LittleEndian.Uint64(hdr[4:])
	} else if body >= 0xfffffff0 {
		return nil, 0, fmt.Errorf("reserved unit length %#x", body)
	}
	if body < 7 {
		return nil, 0, fmt.Errorf("unit length %d", body)
	}
	return hdr, body, nil
}

// unitName returns the DW_AT_name of the unit whose length field is hdr
// and whose first bytes are head, or "" when it cannot be read.
func unitName(hdr, head, abbrev, str []byte) string {
	buf := make([]byte, 4+len(head))
	binary.LittleEndian.PutUint32(buf, uint32(len(head)))
	copy(buf[4:], head)
	if len(hdr) == 12 {
		buf = make([]byte, 12+len(head))
		copy(buf, hdr[:4])
		binary.LittleEndian.PutUint64(buf[4:], uint64(len(head)))
		copy(buf[12:], head)
	}
	d, err := dwarf.New(abbrev, nil, nil, buf, nil, nil, nil, str)
	if err != nil {
		return ""
	}
	e, err := d.Reader().Next()
	if err != nil || e == nil || e.Tag != dwarf.TagCompileUnit {
		return ""
	}
	name, _ := e.Val(dwarf.AttrName).(string)
	return name
}

// mapRuntimeUnit copies the unit at off (its length field hdr, the first
// bytes of its body head, the rest still in r) to off in an anonymous
// mapping, behind one placeholder unit that spans the bytes before it.
func mapRuntimeUnit(r io.Reader, off uint64, hdr, head []byte, body uint64, abbrev, str, addr []byte) (*runtimeDWARF, error) {
	size := off + uint64(len(hdr)) + body
	if off > 0 && off < 11 || off >= 0xfffffff0 {
		return nil, fmt.Errorf("runtime unit at %#x: %w", off, errNoGoDWARF)
	}
	mem, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("map the runtime unit: %w: %w", errNoGoDWARF, err)
	}
	// The first entry follows the version, the abbreviation offset (4 or
	// 8 bytes), the address size and, from DWARF 5, the unit type.
	first := uint64(len(hdr)) + 2 + 1 + uint64(len(hdr)-4)/2 + 4
	if binary.LittleEndian.Uint16(head) >= 5 {
		first++
	}
	rd := &runtimeDWARF{start: dwarf.Offset(off + first), mem: mem}
	if off > 0 {
		// A DWARF 4 unit of nothing but zeros (null entries), whose
		// abbreviations are the real ones, so that New accepts it.
		binary.LittleEndian.PutUint32(mem, uint32(off-4))
		binary.LittleEndian.PutUint16(mem[4:], 4)
		binary.LittleEndian.PutUint32(mem[6:], 0)
		mem[10] = 8
	}
	u := mem[off:]
	n := copy(u, hdr)
	n += copy(u[n:], head)
	if _, err := io.ReadFull(r, u[n:]); err != nil {
		rd.close()
		return nil, fmt.Errorf("read the runtime unit: %w: %w", errNoGoDWARF, err)
	}
	rd.data, err = dwarf.New(abbrev, nil, nil, mem, nil, nil, nil, str)
	if err == nil && len(addr) > 0 {
		// The unit's functions name their addresses by index (DWARF 5).
		err = rd.data.AddSection(".debug_addr", addr)
	}
	if err != nil {
		rd.close()
		return nil, fmt.Errorf("parse the runtime unit: %w: %w", errNoGoDWARF, err)
	}
	return rd, nil
}
