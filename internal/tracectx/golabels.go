package tracectx

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// GoLabelLayout says how the pprof label set that g.labels points to is laid
// out; runtime/pprof changed it from a map to a sorted slice in Go 1.24.
type GoLabelLayout uint8

const (
	// GoLabelsNone: no labels can be read (not a Go binary).
	GoLabelsNone GoLabelLayout = iota
	// GoLabelsMap (Go <= 1.23): g.labels points to a labelMap, a
	// map[string]string; that word points to a runtime.hmap whose buckets
	// are bucket<string,string>.
	GoLabelsMap
	// GoLabelsSlice (Go >= 1.24): g.labels points to a labelMap struct whose
	// first field is a []label{key, value string} slice header.
	GoLabelsSlice
)

func (l GoLabelLayout) String() string {
	switch l {
	case GoLabelsMap:
		return "map"
	case GoLabelsSlice:
		return "slice"
	default:
		return "none"
	}
}

// GoMapLayout holds the offsets needed to iterate a Go <= 1.23
// map[string]string from outside the process: runtime.hmap and the bucket
// type of map[string]string.
type GoMapLayout struct {
	HmapCount   uint32 // int: number of live entries
	HmapB       uint32 // uint8: log2 of the number of buckets
	HmapBuckets uint32 // pointer to 1<<B buckets
	HmapOld     uint32 // pointer to the old buckets while the map grows
	BucketSize  uint32 // bytes per bucket, to index the bucket array
	Tophash     uint32 // [8]uint8; a slot holds an entry when >= 5
	Keys        uint32 // [8]string
	Values      uint32 // [8]string
	Overflow    uint32 // pointer to the next bucket of the chain
}

// GoSliceLayout holds the offsets of the Go >= 1.24 label list: the slice
// header inside labelMap and the key/value strings inside one label.
type GoSliceLayout struct {
	List      uint32 // offset of the []label header in labelMap
	LabelSize uint32 // bytes per label
	Key       uint32 // string header of the key inside a label
	Value     uint32 // string header of the value inside a label
}

// GoRuntimeInfo is what an eBPF program needs to read the pprof labels of
// the goroutine running on a thread of this binary: g at fsbase + TLSG, then
// g.m, m.curg (or, in the scheduler, m.lockedg) and its labels, then the
// label set in Layout. Strings are {ptr, len} pairs, pointers 8 bytes
// (linux/amd64 only).
type GoRuntimeInfo struct {
	// GoVersion is the toolchain that built the binary, e.g. "go1.23.12".
	GoVersion string
	// TLSG is the offset of the current g from the thread pointer (fsbase):
	// -8 for internally linked binaries, another negative value when the
	// external linker placed runtime.tlsg (cgo).
	TLSG int64
	// TLSSource says how TLSG was found: "fixed" (no PT_TLS: internal
	// linking, always -8), "symtab" (runtime.tlsg and
	// PT_TLS) or "code" (the runtime's own fs-relative loads of g); on
	// arm64 "x28": g is read from that register, TLSG is unused.
	TLSSource string
	// OffM, OffCurg, OffLabels are the offsets of g.m, m.curg and g.labels.
	OffM, OffCurg, OffLabels uint32
	// OffLockedg is the offset of m.lockedg, the goroutine locked to the
	// thread (runtime.LockOSThread): while that goroutine is preempted or
	// parked its thread runs the scheduler for it, with m.curg nil. Zero
	// when unknown (offset 0 of runtime.m is g0): no fallback then.
	OffLockedg uint32
	// Layout says which of Map and Slice applies.
	Layout GoLabelLayout
	Map    GoMapLayout
	Slice  GoSliceLayout
	// Source says where the struct offsets came from: "dwarf" or "table".
	Source string
}

// goRegGSource is TLSSource for arm64 binaries, whose g is in x28.
const goRegGSource = "x28"

var (
	// ErrNotGoBinary is returned by GoOffsets for a binary without Go build
	// information.
	ErrNotGoBinary = errors.New("not a Go binary")
	// ErrUnsupportedGo is returned by GoOffsets for a Go version, or
	// architecture, whose runtime layout is unknown; the message names it.
	ErrUnsupportedGo = errors.New("unsupported Go runtime")
)

// GoOffsets inspects the Go executable at openPath (a path the agent can
// open, e.g. /proc/PID/root/...) and returns the runtime offsets for reading
// goroutine labels. Offsets come from the binary's DWARF when it has it and
// from a table keyed by Go release otherwise (-ldflags=-s -w). Errors wrap
// ErrNotGoBinary or ErrUnsupportedGo so the caller can count the reason.
func GoOffsets(openPath string) (*GoRuntimeInfo, error) {
	file, err := os.Open(openPath)
	if err != nil {
		return nil, fmt.Errorf("open go binary: %w", err)
	}
	defer file.Close()
	bi, err := buildinfo.Read(file)
	if err != nil {
		return nil, fmt.Errorf("read build info of %s: %w", openPath, ErrNotGoBinary)
	}
	f, err := elf.NewFile(file)
	if err != nil {
		return nil, fmt.Errorf("parse elf %s: %w", openPath, err)
	}
	return goOffsets(f, bi.GoVersion)
}

func goOffsets(f *elf.File, version string) (*GoRuntimeInfo, error) {
	if f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("read goroutine labels on %v: %w", f.Machine, ErrUnsupportedGo)
	}
	info, err := goStructsFromDWARF(f)
	if err != nil {
		// No DWARF (-w), or a layout this code does not understand:
		// the table knows released versions.
		info, err = goStructsFromTable(version)
		if err != nil {
			return nil, err
		}
	}
	info.GoVersion = version
	if f.Machine == elf.EM_AARCH64 {
		// arm64 Go code keeps g in x28, also across system calls; the
		// eBPF program and the ptrace reader take it from there.
		info.TLSSource = goRegGSource
		return info, nil
	}
	tlsg, src, err := goTLSG(f)
	if err != nil {
		return nil, err
	}
	info.TLSG, info.TLSSource = tlsg, src
	return info, nil
}

// goMinor returns N of "go1.N", "go1.N.P", "go1.NrcX" or
// "devel go1.N-..."; ok is false for anything else.
func goMinor(version string) (int, bool) {
	v := strings.TrimPrefix(version, "devel ")
	v, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return 0, false
	}
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(v[:end])
	return n, err == nil
}
