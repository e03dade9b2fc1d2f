package sampler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

var (
	// procMapsHeader is where the entries of a proc_maps record start.
	procMapsHeader = int(unsafe.Offsetof(bpf.ExitMapsProcMaps{}.Data))
	procMapsData   = len(bpf.ExitMapsProcMaps{}.Data)
	procVmaSize    = int(unsafe.Sizeof(bpf.ExitMapsProcVma{}))
)

// procMaps decodes the mappings captured as a process exited: proc_vma
// entries, each followed by the path components of its file, leaf first.
// Anything inconsistent fails the whole record: a mapping placed from a
// misread entry could name the wrong file.
func (d *decoder) procMaps(raw []byte) (*ProcEvent, error) {
	if len(raw) < procMapsHeader || len(raw) > procMapsHeader+procMapsData {
		return nil, fmt.Errorf("decode proc maps: unexpected size %d", len(raw))
	}
	var h bpf.ExitMapsProcMaps // header only
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), procMapsHeader), raw)
	data := raw[procMapsHeader:]
	if int(h.Len) != len(data) {
		return nil, fmt.Errorf("decode proc maps: %d bytes of entries in a record holding %d", h.Len, len(data))
	}
	pe := &ProcEvent{PID: h.Pid, Exit: true, Time: d.conv.Time(clock.KTime(h.KtimeNs)),
		Maps: make([]VMA, 0, h.Nr), MapsDropped: int(h.Dropped)}
	pos := 0
	prev := ""
	for i := 0; i < int(h.Nr); i++ {
		if pos+procVmaSize > len(data) {
			return nil, fmt.Errorf("decode proc maps: entry %d of %d past the end", i, h.Nr)
		}
		var v bpf.ExitMapsProcVma
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), procVmaSize), data[pos:])
		pos += procVmaSize
		end := pos + int(v.NameLen)
		if end > len(data) || v.End <= v.Start {
			return nil, fmt.Errorf("decode proc maps: entry %d malformed", i)
		}
		m := VMA{Start: v.Start, End: v.End, Offset: v.Offset, Inode: v.Ino, Dev: KernelDev(v.Dev)}
		switch flags := bpf.ExitMapsProcVmaFlag(v.Flags); {
		case flags&bpf.ExitMapsProcVmaFlagPROC_VMA_VDSO != 0:
			m.Path, m.Inode, m.Dev = "[vdso]", 0, "00:00"
		case flags&bpf.ExitMapsProcVmaFlagPROC_VMA_SAME_FILE != 0:
			m.Path = prev
		default:
			m.Path = joinComponents(data[pos:end], flags&bpf.ExitMapsProcVmaFlagPROC_VMA_PATH_FULL != 0)
			if m.Path == "" {
				// No name fitted: the file can still be found by its inode.
				m.Path = fmt.Sprintf("dev %s inode %d", m.Dev, m.Inode)
			}
			prev = m.Path
		}
		if bpf.ExitMapsProcVmaFlag(v.Flags)&bpf.ExitMapsProcVmaFlagPROC_VMA_EXE != 0 {
			pe.Exe = m.Path
		}
		pe.Maps = append(pe.Maps, m)
		pos = (end + 7) &^ 7
	}
	slices.SortFunc(pe.Maps, func(a, b VMA) int { return cmp.Compare(a.Start, b.Start) })
	return pe, nil
}

// joinComponents turns NUL-terminated path components, leaf first, into a
// path: absolute when they reach the process's root, else relative (a
// name for display that is never opened).
func joinComponents(b []byte, full bool) string {
	var parts []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		parts = append(parts, string(b[:i]))
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	slices.Reverse(parts)
	p := strings.Join(parts, "/")
	if full {
		p = "/" + p
	}
	return p
}
