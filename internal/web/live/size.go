package live

import (
	"unsafe"

	"github.com/spanprof/spanprof/internal/profile"
)

// Sizes of the values a batch holds, so the window's byte budget follows
// the types rather than a constant measured once.
const (
	sampleSize  = int64(unsafe.Sizeof(profile.Sample{}))
	frameSize   = int64(unsafe.Sizeof(profile.Frame{}))
	mappingSize = int64(unsafe.Sizeof(profile.Mapping{}))
	processSize = int64(unsafe.Sizeof(profile.Process{}))
	// A Go map entry with its share of buckets and a slice header for
	// byTrace; measured against the heap in TestBatchBytesTracksHeap.
	traceEntrySize = 16 + 24 + 48
	// Allocations round up to size classes; strings of a few dozen bytes
	// waste about this much each.
	stringOverhead = 8
)

// batchBytes estimates the heap a decoded batch keeps alive: the sample
// array, each distinct stack, mapping and string once (the decoder shares
// them within a request), and the trace index. It is what --window-bytes
// bounds.
func batchBytes(b *batch) int64 {
	p := b.p
	n := int64(cap(p.Samples)) * sampleSize
	stacks := map[*profile.Frame]bool{}
	mappings := map[*profile.Mapping]bool{}
	strs := map[*byte]bool{}
	str := func(s string) {
		if len(s) == 0 {
			return
		}
		if d := unsafe.StringData(s); !strs[d] {
			strs[d] = true
			n += int64(len(s)) + stringOverhead
		}
	}
	for i := range p.Samples {
		s := &p.Samples[i]
		str(s.ThreadName)
		str(s.State)
		str(s.Reason)
		if len(s.Frames) == 0 || stacks[&s.Frames[0]] {
			continue
		}
		stacks[&s.Frames[0]] = true
		n += int64(cap(s.Frames)) * frameSize
		for j := range s.Frames {
			f := &s.Frames[j]
			str(f.Function)
			str(f.File)
			if m := f.Mapping; m != nil && !mappings[m] {
				mappings[m] = true
				n += mappingSize
				str(m.Path)
				str(m.BuildID)
				str(m.HTLHash)
			}
		}
	}
	for _, pr := range p.Processes {
		n += processSize
		str(pr.ExeName)
		str(pr.ExePath)
		str(pr.ServiceName)
		str(pr.ContainerID)
		for k, v := range pr.Attributes {
			str(k)
			str(v)
			n += 32
		}
	}
	for _, idx := range b.byTrace {
		n += traceEntrySize + int64(cap(idx))*4
	}
	return n
}
