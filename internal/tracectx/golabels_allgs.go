package tracectx

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// GoGLayout holds the offsets of the runtime.g fields that sampling parked
// goroutines from outside the process reads: where the goroutine's stack
// lies, where it was parked (the saved g.sched registers), its status, id,
// wait reason and labels.
type GoGLayout struct {
	StackLo, StackHi          uint32 // g.stack.lo, g.stack.hi
	SchedSP, SchedPC, SchedBP uint32 // g.sched.sp, .pc, .bp
	Status                    uint32 // g.atomicstatus (uint32)
	GoID                      uint32 // g.goid (uint64)
	WaitReason                uint32 // g.waitreason (uint8)
	// TrackingSeq (uint8) changes every time the goroutine stops running;
	// an unchanged value, with unchanged sched registers, says the
	// goroutine stayed parked, so a stack read at an earlier sample holds.
	TrackingSeq uint32
	Labels      uint32 // g.labels (pointer)
}

// Span returns how many bytes from the start of g cover every field.
func (l *GoGLayout) Span() uint32 {
	end := uint32(0)
	for _, f := range []struct{ off, size uint32 }{
		{l.StackLo, 8}, {l.StackHi, 8}, {l.SchedSP, 8}, {l.SchedPC, 8}, {l.SchedBP, 8},
		{l.Status, 4}, {l.GoID, 8}, {l.WaitReason, 1}, {l.TrackingSeq, 1}, {l.Labels, 8},
	} {
		end = max(end, f.off+f.size)
	}
	return end
}

// GoAllGInfo is what an agent needs to list a Go process's goroutines from
// its memory: the link-time addresses of runtime.allglen and
// runtime.allgptr (the runtime stores allgptr before allglen, so reading
// allglen first gives a prefix of the array allgptr points to), the g
// layout, the wait-reason strings and the label layout.
type GoAllGInfo struct {
	GoVersion string
	// AllGLen and AllGPtr are ELF virtual addresses; for a position
	// independent executable (PIE) add the load bias.
	AllGLen, AllGPtr uint64
	PIE              bool
	G                GoGLayout
	// GSource says where G came from: "dwarf" or "table".
	GSource string
	// WaitReasons is runtime.waitReasonStrings, indexed by g.waitreason.
	WaitReasons []string
	// ReasonSource is "symtab" (read from the binary) or "table".
	ReasonSource string
	// Labels reads the goroutine labels g.labels points to; nil when the
	// binary's label layout is unknown (labels are then not read).
	Labels *GoRuntimeInfo
}

// ErrNoAllGSymbols is returned by GoAllGOffsets for a binary without the
// runtime.allglen and runtime.allgptr symbols (stripped with -s).
var ErrNoAllGSymbols = errors.New("runtime.allglen and runtime.allgptr not in symbol table")

// GoAllGOffsets inspects the Go executable at openPath for sampling its
// goroutines. Struct offsets come from DWARF, else from a table per Go
// release; the wait-reason strings from runtime.waitReasonStrings in the
// binary, else from a table generated from each release's runtime source.
// The allg symbols need the symbol table: errors wrap ErrNoAllGSymbols,
// ErrNotGoBinary or ErrUnsupportedGo.
func GoAllGOffsets(openPath string) (*GoAllGInfo, error) {
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
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("sample goroutines on %v: %w", f.Machine, ErrUnsupportedGo)
	}
	info := &GoAllGInfo{GoVersion: bi.GoVersion, PIE: f.Type == elf.ET_DYN}
	if info.G, err = goGLayoutFromDWARF(f); err == nil {
		info.GSource = "dwarf"
	} else if info.G, err = goGLayoutFromTable(bi.GoVersion); err == nil {
		info.GSource = "table"
	} else {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", openPath, ErrNoAllGSymbols)
	}
	var reasons elf.Symbol
	for _, s := range syms {
		switch s.Name {
		case "runtime.allglen":
			info.AllGLen = s.Value
		case "runtime.allgptr":
			info.AllGPtr = s.Value
		case "runtime.waitReasonStrings":
			reasons = s
		}
	}
	if info.AllGLen == 0 || info.AllGPtr == 0 {
		return nil, fmt.Errorf("inspect %s: %w", openPath, ErrNoAllGSymbols)
	}
	if info.WaitReasons, err = goReadStringArray(f, reasons.Value, reasons.Size/16); err == nil && len(info.WaitReasons) > 0 {
		info.ReasonSource = "symtab"
	} else if info.WaitReasons, err = goWaitReasonsFromTable(bi.GoVersion); err == nil {
		info.ReasonSource = "table"
	} else {
		return nil, err
	}
	if labels, err := goOffsets(f, bi.GoVersion); err == nil {
		info.Labels = labels
	}
	return info, nil
}

// goGLayoutFromDWARF reads the runtime.g fields from DWARF.
func goGLayoutFromDWARF(f *elf.File) (GoGLayout, error) {
	var l GoGLayout
	types, err := goFindDWARFTypes(f)
	if err != nil {
		return l, err
	}
	g := types["runtime.g"]
	for _, fl := range []struct {
		path []string
		dst  *uint32
	}{
		{[]string{"stack", "lo"}, &l.StackLo},
		{[]string{"stack", "hi"}, &l.StackHi},
		{[]string{"sched", "sp"}, &l.SchedSP},
		{[]string{"sched", "pc"}, &l.SchedPC},
		{[]string{"sched", "bp"}, &l.SchedBP},
		{[]string{"atomicstatus"}, &l.Status},
		{[]string{"goid"}, &l.GoID},
		{[]string{"waitreason"}, &l.WaitReason},
		{[]string{"trackingSeq"}, &l.TrackingSeq},
		{[]string{"labels"}, &l.Labels},
	} {
		if *fl.dst, err = goNestedOffset(g, fl.path...); err != nil {
			return l, err
		}
	}
	return l, nil
}

// goNestedOffset returns the offset of a field path (sched.sp) in t.
func goNestedOffset(t dwarf.Type, path ...string) (uint32, error) {
	var off uint32
	for _, name := range path {
		fl, err := goField(t, name)
		if err != nil {
			return 0, err
		}
		off += uint32(fl.ByteOffset)
		t = fl.Type
	}
	return off, nil
}

// goGTable holds the g layout per Go release, for binaries without DWARF
// (-w); each row was read from the DWARF of a binary that release built
// (TestGoAllGTableMatchesDWARF checks them).
var goGTable = map[int]GoGLayout{
	21: {0, 8, 56, 64, 104, 144, 152, 176, 188, 344},
	22: {0, 8, 56, 64, 104, 144, 152, 176, 191, 344},
	23: {0, 8, 56, 64, 104, 152, 160, 184, 199, 352},
	24: {0, 8, 56, 64, 104, 152, 160, 184, 199, 352},
	25: {0, 8, 56, 64, 96, 144, 152, 176, 191, 344},
	26: {0, 8, 56, 64, 96, 144, 152, 176, 191, 352},
}

func goGLayoutFromTable(version string) (GoGLayout, error) {
	minor, ok := goMinor(version)
	if !ok {
		return GoGLayout{}, fmt.Errorf("parse go version %q: %w", version, ErrUnsupportedGo)
	}
	l, ok := goGTable[minor]
	if !ok {
		return l, fmt.Errorf("no runtime.g offsets for %s without DWARF (known: go1.21 to go1.26): %w", version, ErrUnsupportedGo)
	}
	return l, nil
}

func goWaitReasonsFromTable(version string) ([]string, error) {
	minor, ok := goMinor(version)
	if !ok {
		return nil, fmt.Errorf("parse go version %q: %w", version, ErrUnsupportedGo)
	}
	r, ok := goWaitReasonTable[minor]
	if !ok {
		return nil, fmt.Errorf("no wait-reason strings for %s without symbols: %w", version, ErrUnsupportedGo)
	}
	return r, nil
}

// goReadStringArray reads n Go string headers at vaddr from the file's
// sections, and the strings they point to.
func goReadStringArray(f *elf.File, vaddr, n uint64) ([]string, error) {
	if vaddr == 0 || n == 0 || n > 1024 {
		return nil, fmt.Errorf("read string array at %#x: %d entries", vaddr, n)
	}
	hdrs := make([]byte, 16*n)
	if err := goReadVaddr(f, vaddr, hdrs); err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i := range out {
		p := binary.LittleEndian.Uint64(hdrs[16*i:])
		l := binary.LittleEndian.Uint64(hdrs[16*i+8:])
		if l == 0 {
			continue
		}
		if l > 256 {
			return nil, fmt.Errorf("read string %d of array at %#x: length %d", i, vaddr, l)
		}
		b := make([]byte, l)
		if err := goReadVaddr(f, p, b); err != nil {
			return nil, err
		}
		out[i] = string(b)
	}
	return out, nil
}

// goReadVaddr fills b from the file bytes at ELF virtual address vaddr.
func goReadVaddr(f *elf.File, vaddr uint64, b []byte) error {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || vaddr < s.Addr || vaddr+uint64(len(b)) > s.Addr+s.Size {
			continue
		}
		if _, err := s.ReadAt(b, int64(vaddr-s.Addr)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s at %#x: %w", s.Name, vaddr, err)
		}
		return nil
	}
	return fmt.Errorf("read %d bytes at %#x: in no section with file data", len(b), vaddr)
}

// ReadGoLabelSet reads the label set that a g.labels pointer (labels,
// non-zero) points to, in the layout of info; see ReadGoLabels.
func ReadGoLabelSet(mem io.ReaderAt, labels uint64, info *GoRuntimeInfo) (map[string]string, error) {
	switch info.Layout {
	case GoLabelsSlice:
		return goReadLabelSlice(mem, labels, &info.Slice)
	case GoLabelsMap:
		return goReadLabelMap(mem, labels, &info.Map)
	default:
		return nil, fmt.Errorf("read labels: layout %v: %w", info.Layout, ErrUnsupportedGo)
	}
}

// GoAllGInfoForTest returns the tables' layout for Go 1.minor with a
// slice label layout and no addresses, for tests of readers that fake a
// process's memory.
func GoAllGInfoForTest(minor int) (*GoAllGInfo, error) {
	g, err := goGLayoutFromTable(fmt.Sprintf("go1.%d", minor))
	if err != nil {
		return nil, err
	}
	reasons, err := goWaitReasonsFromTable(fmt.Sprintf("go1.%d", minor))
	if err != nil {
		return nil, err
	}
	return &GoAllGInfo{
		GoVersion: fmt.Sprintf("go1.%d", minor), G: g, GSource: "table",
		WaitReasons: reasons, ReasonSource: "table",
		Labels: &GoRuntimeInfo{Layout: GoLabelsSlice, Slice: goLabelSlice, Source: "table"},
	}, nil
}
