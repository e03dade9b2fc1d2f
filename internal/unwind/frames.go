package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"sync"

	"github.com/spanprof/spanprof/internal/elfmap"
)

// frameSection is a loaded .eh_frame or .debug_frame with an index of its
// FDEs by pc range. Instructions are run per function on first use.
type frameSection struct {
	data  []byte
	addr  uint64 // virtual address of data[0]; 0 for .debug_frame
	debug bool   // .debug_frame layout (absolute CIE offsets and addresses)
	arch  Arch   // register numbers of the file's machine

	// hdr is the binary-search table of .eh_frame_hdr when it is usable:
	// pairs of sdata4 (initial pc, FDE address) relative to hdrAddr.
	hdr     []byte
	hdrAddr uint64
	// fdes is built by a scan when there is no usable hdr table.
	fdes []fdeRef

	mu   sync.Mutex
	cies map[int]*cie

	// maps own data and hdr when they are mappings of the file
	// (elfmap): the methods that read them keep fs reachable.
	maps []*elfmap.Section
	heap int64 // bytes of the sections read, not mapped
}

// fdeRef locates one FDE.
type fdeRef struct {
	start, end uint64
	off        int
}

// loadFrameSection reads name ("eh_frame" or "debug_frame") from f, or
// returns nil when f has no such section. a numbers f's registers.
func loadFrameSection(f *elf.File, a Arch, debug bool) (*frameSection, error) {
	name := ".eh_frame"
	if debug {
		name = ".debug_frame"
	}
	s := f.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil, nil
	}
	fs := &frameSection{debug: debug, arch: a, cies: map[int]*cie{}}
	data, err := fs.sectionData(s)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	fs.data = data
	if !debug {
		fs.addr = s.Addr
		if h := f.Section(".eh_frame_hdr"); h != nil {
			if hd, err := fs.sectionData(h); err == nil {
				fs.useHdr(hd, h.Addr)
			}
		}
	}
	if fs.hdr == nil {
		if err := fs.scan(); err != nil {
			return nil, fmt.Errorf("index %s: %w", name, err)
		}
	}
	return fs, nil
}

// sectionData maps s (an .eh_frame of a big C++ library is tens of MB,
// read a few entries at a time) or, when it cannot be mapped (compressed
// .debug_frame), reads it.
func (fs *frameSection) sectionData(s *elf.Section) ([]byte, error) {
	if m, ok := elfmap.Map(s); ok {
		fs.maps = append(fs.maps, m)
		return m.Data, nil
	}
	d, err := s.Data()
	fs.heap += int64(len(d))
	return d, err
}

// heapBytes is what fs holds on the heap: the sections it read rather
// than mapped, and its FDE index.
func (fs *frameSection) heapBytes() int64 {
	return fs.heap + int64(len(fs.fdes))*24
}

// dropPages releases the resident pages of fs's mappings.
func (fs *frameSection) dropPages() {
	for _, m := range fs.maps {
		m.DropPages()
	}
}

// useHdr adopts the .eh_frame_hdr search table if it has the encoding
// every linker writes (datarel sdata4) and points at this .eh_frame.
func (fs *frameSection) useHdr(hd []byte, addr uint64) {
	if len(hd) < 4 || hd[0] != 1 || hd[3] != peDatarel|peSdata4 {
		return
	}
	r := &reader{b: hd, off: 4}
	ehPtr := r.pointer(hd[1], addr, addr)
	count := r.pointer(hd[2], addr, addr)
	if r.err != nil || ehPtr != fs.addr || count == 0 || uint64(len(hd)-r.off) < count*8 {
		return
	}
	fs.hdr = hd[r.off : r.off+int(count)*8]
	fs.hdrAddr = addr
}

// scan indexes every FDE by its pc range.
func (fs *frameSection) scan() error {
	for off := 0; off < len(fs.data); {
		e, err := fs.entry(off)
		if err != nil {
			return err
		}
		if e.length == 0 {
			if fs.debug {
				return nil
			}
			off = e.next
			continue
		}
		if !e.isCIE {
			start, end, _, err := fs.fde(e)
			if err == nil && end > start {
				fs.fdes = append(fs.fdes, fdeRef{start: start, end: end, off: off})
			}
		}
		off = e.next
	}
	sort.Slice(fs.fdes, func(i, j int) bool { return fs.fdes[i].start < fs.fdes[j].start })
	return nil
}

// entry is one CIE or FDE header.
type entry struct {
	length  uint64
	isCIE   bool
	ciePtr  int
	body    *reader // positioned after the id field
	next    int
	entryAt int
}

func (fs *frameSection) entry(off int) (entry, error) {
	r := &reader{b: fs.data, off: off}
	e := entry{entryAt: off}
	e.length = uint64(r.u32())
	wide := e.length == 0xffffffff
	if wide {
		e.length = r.u64()
	}
	if r.err != nil {
		return e, r.err
	}
	if e.length == 0 {
		e.next = r.off
		return e, nil
	}
	end := r.off + int(e.length)
	if e.length > uint64(len(fs.data)) || end > len(fs.data) {
		return e, fmt.Errorf("entry at %d overruns section: %w", off, errCFI)
	}
	idPos := r.off
	var id uint64
	if wide {
		id = r.u64()
	} else {
		id = uint64(r.u32())
	}
	switch {
	case fs.debug:
		e.isCIE = id == 0xffffffff || id == 0xffffffffffffffff
		e.ciePtr = int(id)
	default:
		e.isCIE = id == 0
		e.ciePtr = idPos - int(id)
	}
	e.body = &reader{b: fs.data[:end], off: r.off}
	e.next = end
	return e, r.err
}

// cieAt parses (once) the CIE at off.
func (fs *frameSection) cieAt(off int) (*cie, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if c, ok := fs.cies[off]; ok {
		return c, nil
	}
	e, err := fs.entry(off)
	if err != nil {
		return nil, err
	}
	if !e.isCIE {
		return nil, fmt.Errorf("no CIE at %d: %w", off, errCFI)
	}
	c, err := parseCIE(e.body, fs.debug)
	if err != nil {
		return nil, err
	}
	fs.cies[off] = c
	return c, nil
}

// fde decodes an FDE's pc range and returns its instructions.
func (fs *frameSection) fde(e entry) (start, end uint64, insns []byte, err error) {
	if e.ciePtr < 0 || e.ciePtr >= len(fs.data) {
		return 0, 0, nil, fmt.Errorf("FDE at %d: CIE pointer out of section: %w", e.entryAt, errCFI)
	}
	c, err := fs.cieAt(e.ciePtr)
	if err != nil {
		return 0, 0, nil, err
	}
	r := e.body
	if fs.debug {
		start = r.u64()
		end = start + r.u64()
	} else {
		start = r.pointer(c.fdeEnc, fs.addr, 0)
		end = start + r.pointer(c.fdeEnc&0x0f, fs.addr, 0)
	}
	if c.hasAug {
		r.bytes(int(r.uleb()))
	}
	if r.err != nil {
		return 0, 0, nil, r.err
	}
	return start, end, r.b[r.off:], nil
}

// find returns the FDE offset covering pc.
func (fs *frameSection) find(pc uint64) (int, bool) {
	defer runtime.KeepAlive(fs)
	if fs.hdr != nil {
		n := len(fs.hdr) / 8
		at := func(i int) uint64 {
			return fs.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(fs.hdr[i*8:]))))
		}
		i := sort.Search(n, func(i int) bool { return at(i) > pc }) - 1
		if i < 0 {
			return 0, false
		}
		fdeAddr := fs.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(fs.hdr[i*8+4:]))))
		return int(fdeAddr - fs.addr), true
	}
	i := sort.Search(len(fs.fdes), func(i int) bool { return fs.fdes[i].start > pc }) - 1
	if i < 0 || pc >= fs.fdes[i].end {
		return 0, false
	}
	return fs.fdes[i].off, true
}

// rows runs the instructions of the FDE covering pc. ok is false when no
// FDE covers pc.
func (fs *frameSection) rows(pc uint64) (start uint64, rows []row, ok bool, err error) {
	defer runtime.KeepAlive(fs)
	defer elfmap.Recover(elfmap.Guard(), &ok)
	off, found := fs.find(pc)
	if !found || off < 0 || off >= len(fs.data) {
		return 0, nil, false, nil
	}
	e, err := fs.entry(off)
	if err != nil || e.isCIE || e.length == 0 {
		return 0, nil, false, err
	}
	start, end, insns, err := fs.fde(e)
	if err != nil {
		return 0, nil, false, err
	}
	if pc < start || pc >= end {
		return 0, nil, false, nil
	}
	c, err := fs.cieAt(e.ciePtr)
	if err != nil {
		return 0, nil, false, err
	}
	rows, err = execute(fs.arch, c, insns, start)
	if err != nil {
		return 0, nil, false, err
	}
	rows = append(rows, row{pc: end}) // Unknown past the end
	return start, rows, true, nil
}
