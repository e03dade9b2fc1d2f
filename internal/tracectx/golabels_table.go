package tracectx

import "fmt"

// goMapStringString is the runtime.hmap and bucket<string,string> layout,
// unchanged from Go 1.11 to 1.23 (the last release with these maps holding
// pprof labels).
var goMapStringString = GoMapLayout{
	HmapCount: 0, HmapB: 9, HmapBuckets: 16, HmapOld: 24,
	BucketSize: 272, Tophash: 0, Keys: 8, Values: 136, Overflow: 264,
}

// goLabelSlice is the []label layout of Go 1.24 on (runtime/pprof.label,
// then internal/runtime/pprof/label.Label from 1.26).
var goLabelSlice = GoSliceLayout{List: 0, LabelSize: 32, Key: 0, Value: 16}

// goStructTable holds g.m, m.curg, m.lockedg and g.labels per Go release
// for binaries without DWARF. Each row was read from the DWARF of a binary
// built by that release (TestGoOffsetsTableMatchesDWARF rebuilds and checks
// them); the runtime does not change these structs in patch releases.
var goStructTable = map[int]struct {
	m, curg, lockedg, labels uint32
	layout                   GoLabelLayout
}{
	21: {48, 192, 352, 344, GoLabelsMap},
	22: {48, 192, 344, 344, GoLabelsMap},
	23: {48, 192, 368, 352, GoLabelsMap},
	24: {48, 192, 368, 352, GoLabelsSlice},
	25: {48, 184, 360, 344, GoLabelsSlice},
	26: {48, 184, 384, 352, GoLabelsSlice},
}

// goStructsFromTable returns the table's offsets for version, or an error
// naming the version when the table has no row for it.
func goStructsFromTable(version string) (*GoRuntimeInfo, error) {
	minor, ok := goMinor(version)
	if !ok {
		return nil, fmt.Errorf("parse go version %q: %w", version, ErrUnsupportedGo)
	}
	row, ok := goStructTable[minor]
	if !ok {
		return nil, fmt.Errorf("no runtime offsets for %s without DWARF (known: go1.21 to go1.26): %w", version, ErrUnsupportedGo)
	}
	info := &GoRuntimeInfo{
		OffM: row.m, OffCurg: row.curg, OffLockedg: row.lockedg, OffLabels: row.labels,
		Layout: row.layout, Source: "table",
	}
	if row.layout == GoLabelsMap {
		info.Map = goMapStringString
	} else {
		info.Slice = goLabelSlice
	}
	return info, nil
}
