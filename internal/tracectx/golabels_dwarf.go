package tracectx

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
)

// errNoGoDWARF says the binary lacks the runtime types in DWARF (stripped
// with -w, or DWARF the reader could not parse): the table is used instead.
var errNoGoDWARF = errors.New("no Go runtime types in DWARF")

// goDWARFTypes are the type names GoOffsets looks up in DWARF. Go 1.26 moved
// the label element to internal/runtime/pprof/label.Label; the walk below
// starts at labelMap, so it does not need that name.
var goDWARFTypes = map[string]bool{
	"runtime.g":              true,
	"runtime.m":              true,
	"runtime.hmap":           true,
	"bucket<string,string>":  true,
	"runtime/pprof.labelMap": true,
}

// goStructsFromDWARF reads g.m, m.curg, m.lockedg, g.labels and the label
// layout from the binary's DWARF.
func goStructsFromDWARF(f *elf.File) (*GoRuntimeInfo, error) {
	types, err := goFindDWARFTypes(f)
	if err != nil {
		return nil, err
	}
	info := &GoRuntimeInfo{Source: "dwarf"}
	if info.OffM, err = goFieldOffset(types["runtime.g"], "m"); err != nil {
		return nil, err
	}
	if info.OffLabels, err = goFieldOffset(types["runtime.g"], "labels"); err != nil {
		return nil, err
	}
	if info.OffCurg, err = goFieldOffset(types["runtime.m"], "curg"); err != nil {
		return nil, err
	}
	// Optional: without it, samples of a locked thread in the scheduler
	// stay unlinked, as they were before the fallback; not a reason to
	// give up the labels.
	info.OffLockedg, _ = goFieldOffset(types["runtime.m"], "lockedg")
	switch lm := goUntypedef(types["runtime/pprof.labelMap"]).(type) {
	case *dwarf.StructType:
		info.Layout = GoLabelsSlice
		info.Slice, err = goSliceLayoutFromDWARF(lm)
	case *dwarf.PtrType: // map[string]string is a *runtime.hmap
		info.Layout = GoLabelsMap
		info.Map, err = goMapLayoutFromDWARF(types["runtime.hmap"], types["bucket<string,string>"])
	case nil:
		// The program never builds a label set (the linker dropped
		// labelMap), so g.labels stays nil: the layout does not matter.
		return nil, fmt.Errorf("find runtime/pprof.labelMap: %w", errNoGoDWARF)
	default:
		return nil, fmt.Errorf("runtime/pprof.labelMap is a %T: %w", lm, errNoGoDWARF)
	}
	if err != nil {
		return nil, err
	}
	return info, nil
}

// goFindDWARFTypes walks the top level of the runtime units (see
// goRuntimeUnits) and resolves the types named in goDWARFTypes.
func goFindDWARFTypes(f *elf.File) (map[string]dwarf.Type, error) {
	found := map[string]dwarf.Type{}
	err := goRuntimeUnits(f, func(rd *runtimeDWARF) (bool, error) {
		err := goFindUnitTypes(rd, found)
		// The linker writes every type into one runtime unit (see
		// goRuntimeUnits): once the unit that holds runtime.g is
		// walked, a type still missing (labelMap, in a program that
		// never builds a label set) is in no later one, and the rest
		// of .debug_info need not be decompressed.
		return found["runtime.g"] != nil || goDWARFTypesComplete(found), err
	})
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"runtime.g", "runtime.m"} {
		if found[name] == nil {
			return nil, fmt.Errorf("find %s: %w", name, errNoGoDWARF)
		}
	}
	return found, nil
}

// goFindUnitTypes walks the top level of one unit into found. Types are
// read whole (their names copied), so they outlive the unit's mapping.
func goFindUnitTypes(rd *runtimeDWARF, found map[string]dwarf.Type) error {
	d := rd.data
	r := d.Reader()
	r.Seek(rd.start)
	for !goDWARFTypesComplete(found) {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("walk dwarf: %w: %w", errNoGoDWARF, err)
		}
		if e == nil {
			return nil
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue // descend into the unit's top-level entries
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if goDWARFTypes[name] && found[name] == nil {
			switch e.Tag {
			case dwarf.TagStructType, dwarf.TagTypedef, dwarf.TagPointerType:
				t, err := d.Type(e.Offset)
				if err != nil {
					return fmt.Errorf("read dwarf type %s: %w: %w", name, errNoGoDWARF, err)
				}
				found[name] = t
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	return nil
}

// goDWARFTypesComplete says whether the walk can stop: g, m and labelMap
// are found and, for a map labelMap (Go <= 1.23), hmap and its bucket too.
// Stopping early matters: the DWARF of a large service takes a long time
// to walk to the end.
func goDWARFTypesComplete(found map[string]dwarf.Type) bool {
	lm := found["runtime/pprof.labelMap"]
	if found["runtime.g"] == nil || found["runtime.m"] == nil || lm == nil {
		return false
	}
	if _, isStruct := goUntypedef(lm).(*dwarf.StructType); isStruct {
		return true
	}
	return found["runtime.hmap"] != nil && found["bucket<string,string>"] != nil
}

func goUntypedef(t dwarf.Type) dwarf.Type {
	for {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			return t
		}
		t = td.Type
	}
}

func goField(t dwarf.Type, names ...string) (*dwarf.StructField, error) {
	st, ok := goUntypedef(t).(*dwarf.StructType)
	if !ok {
		return nil, fmt.Errorf("find field %v: %v is not a struct: %w", names, t, errNoGoDWARF)
	}
	for _, fl := range st.Field {
		for _, n := range names {
			if fl.Name == n {
				return fl, nil
			}
		}
	}
	return nil, fmt.Errorf("find field %v in %s: %w", names, st.StructName, errNoGoDWARF)
}

func goFieldOffset(t dwarf.Type, names ...string) (uint32, error) {
	fl, err := goField(t, names...)
	if err != nil {
		return 0, err
	}
	return uint32(fl.ByteOffset), nil
}

// goSliceLayoutFromDWARF follows labelMap{LabelSet|label.Set{list|List
// []label}} down to the label struct.
func goSliceLayoutFromDWARF(lm *dwarf.StructType) (GoSliceLayout, error) {
	var l GoSliceLayout
	if len(lm.Field) == 0 {
		return l, fmt.Errorf("labelMap has no fields: %w", errNoGoDWARF)
	}
	set := lm.Field[0] // the embedded LabelSet (<= 1.25) or label.Set
	list, err := goField(set.Type, "list", "List")
	if err != nil {
		return l, err
	}
	l.List = uint32(set.ByteOffset + list.ByteOffset)
	arr, err := goField(list.Type, "array")
	if err != nil {
		return l, err
	}
	ptr, ok := goUntypedef(arr.Type).(*dwarf.PtrType)
	if !ok {
		return l, fmt.Errorf("label slice array is %v: %w", arr.Type, errNoGoDWARF)
	}
	l.LabelSize = uint32(ptr.Type.Size())
	if l.Key, err = goFieldOffset(ptr.Type, "key", "Key"); err != nil {
		return l, err
	}
	if l.Value, err = goFieldOffset(ptr.Type, "value", "Value"); err != nil {
		return l, err
	}
	return l, nil
}

// goMapLayoutFromDWARF reads runtime.hmap and the map[string]string bucket.
func goMapLayoutFromDWARF(hmap, bucket dwarf.Type) (GoMapLayout, error) {
	var l GoMapLayout
	if hmap == nil || bucket == nil {
		return l, fmt.Errorf("find runtime.hmap and bucket<string,string>: %w", errNoGoDWARF)
	}
	var err error
	for _, f := range []struct {
		t    dwarf.Type
		name string
		dst  *uint32
	}{
		{hmap, "count", &l.HmapCount},
		{hmap, "B", &l.HmapB},
		{hmap, "buckets", &l.HmapBuckets},
		{hmap, "oldbuckets", &l.HmapOld},
		{bucket, "tophash", &l.Tophash},
		{bucket, "keys", &l.Keys},
		{bucket, "values", &l.Values},
		{bucket, "overflow", &l.Overflow},
	} {
		if *f.dst, err = goFieldOffset(f.t, f.name); err != nil {
			return l, err
		}
	}
	l.BucketSize = uint32(bucket.Size())
	return l, nil
}
