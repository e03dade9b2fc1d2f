package profile

import (
	"path/filepath"
	"strconv"
)

// KernelMappingPath names the kernel image in every output, as perf does.
const KernelMappingPath = "[kernel.kallsyms]"

// kernelSpaceStart is the lowest x86-64 kernel-half address; frames above
// it without a mapping are kernel frames.
const kernelSpaceStart = 0xffff800000000000

// ExportMapping returns the mapping an exporter should attach to f: its own
// mapping (with the kernel path filled in when the symbolizer left it
// empty), or a synthetic kernel mapping for an unmapped kernel address, so
// that kernel frames are always recognisable. ok is false when the frame
// lies in no known mapping.
func ExportMapping(f Frame) (m Mapping, ok bool) {
	switch {
	case f.Mapping != nil:
		m = *f.Mapping
		if m.Kernel && m.Path == "" {
			m.Path = KernelMappingPath
		}
		return m, true
	case f.Address >= kernelSpaceStart:
		return Mapping{Path: KernelMappingPath, Kernel: true}, true
	}
	return Mapping{}, false
}

// DisplayName is the frame's function, or "module+0xoff" for a frame that
// could not be symbolized, so flat outputs (folded stacks, summaries, flame
// graphs) can still tell unsymbolized frames apart. The offset is the file
// offset for user mappings and the offset from the mapping start for the
// kernel; "0xADDR" when there is no mapping.
func (f Frame) DisplayName() string {
	if f.Function != "" {
		return f.Function
	}
	m, ok := ExportMapping(f)
	if !ok {
		return "0x" + strconv.FormatUint(f.Address, 16)
	}
	off := f.Address
	if f.Address >= m.Start {
		off = f.Address - m.Start
		if !m.Kernel {
			off += m.Offset
		}
	}
	name := m.Path
	if !m.Kernel {
		name = filepath.Base(m.Path)
	}
	return name + "+0x" + strconv.FormatUint(off, 16)
}

// ProcessName is how outputs name a process: its executable name, or
// "pid N" when it is unknown.
func (p *Profile) ProcessName(pid uint32) string {
	if pr := p.Processes[pid]; pr != nil && pr.ExeName != "" {
		return pr.ExeName
	}
	return "pid " + strconv.FormatUint(uint64(pid), 10)
}
