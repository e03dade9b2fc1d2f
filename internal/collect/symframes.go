package collect

import (
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// The symbolizer knows nothing of profiles: it takes the range and offset
// of a mapping and returns function, file and line. The conversions
// between its types and the profile's are here, where a stack becomes
// frames.

// symMapping is what the symbolizer needs of a tracked mapping.
func symMapping(m *proc.Mapping) symbolize.Mapping {
	return symbolize.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset}
}

// ObjectFrames appends the frames of runtime address addr in mapping pm
// of object obj: one frame per function of the inlined chain, innermost
// first, all with Address addr and Mapping pm. An address no table names
// still yields one frame, address and mapping only, so exporters show
// module and offset rather than losing it.
func ObjectFrames(dst []profile.Frame, obj *symbolize.Object, pm *profile.Mapping, addr uint64) []profile.Frame {
	var buf [8]symbolize.Symbol
	chain := obj.Symbols(buf[:0], symbolize.Mapping{Start: pm.Start, Limit: pm.Limit, Offset: pm.Offset}, addr)
	return symbolFrames(dst, chain, pm, addr)
}

// symbolFrames converts a call chain at addr to frames of mapping pm.
func symbolFrames(dst []profile.Frame, chain []symbolize.Symbol, pm *profile.Mapping, addr uint64) []profile.Frame {
	if len(chain) == 0 {
		return append(dst, profile.Frame{Address: addr, Mapping: pm})
	}
	for _, s := range chain {
		dst = append(dst, profile.Frame{Address: addr, Mapping: pm, Function: s.Function,
			File: s.File, Line: s.Line, Inlined: s.Inlined})
	}
	return dst
}

// setIdentity gives pm the object's build ID or content hash, which
// exporters name the file by (process.executable.build_id.*).
func setIdentity(pm *profile.Mapping, id symbolize.Identity) {
	pm.BuildID, pm.HTLHash = id.BuildID, id.HTLHash
}

// KernelFrames returns the kernel symbols of k as frames: each frame's
// Mapping is one shared mapping of the kernel image or of its module,
// with the build ID k read from /sys, made once here so that every frame
// of a module names the same mapping.
func KernelFrames(k *symbolize.Kallsyms) KernelSymbols {
	mods := k.Modules()
	kf := &kernelFrames{k: k, mappings: make([]*profile.Mapping, len(mods))}
	for i, m := range mods {
		kf.mappings[i] = &profile.Mapping{Start: m.Start, Limit: m.Limit, Path: m.Path, BuildID: m.BuildID, Kernel: true}
	}
	return kf
}

type kernelFrames struct {
	k *symbolize.Kallsyms
	// mappings[i] is the mapping of k.Modules()[i].
	mappings []*profile.Mapping
}

// Frames appends the frame of a kernel address: its function and module
// when kallsyms has it, else the address in the kernel image.
func (kf *kernelFrames) Frames(dst []profile.Frame, addr uint64) []profile.Frame {
	f := profile.Frame{Address: addr, Mapping: kf.mappings[0]}
	if name, mod, ok := kf.k.Resolve(addr); ok {
		f.Function = name
		f.Mapping = kf.mappings[mod]
	}
	return append(dst, f)
}
