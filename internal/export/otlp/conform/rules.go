package conform

import (
	"fmt"
	"slices"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"
)

// shape is how a sample carries its events.
type shape int

const (
	shapeNone       shape = iota // neither values nor timestamps
	shapeValues                  // one value, no timestamps
	shapeTimestamps              // timestamps, no values (each counts one)
	shapeBoth                    // parallel values and timestamps
)

var shapeNames = [...]string{"empty", "values only", "timestamps only", "values and timestamps"}

func (k *check) profiles(data *profilespb.ProfilesData) {
	if len(data.ResourceProfiles) == 0 {
		k.add(RuleStructure, "resource_profiles", "empty")
	}
	for i, rp := range data.ResourceProfiles {
		rpath := fmt.Sprintf("resource_profiles[%d]", i)
		k.kvRefs(rpath+".resource.attributes", rp.GetResource().GetAttributes())
		if len(rp.ScopeProfiles) == 0 {
			k.add(RuleStructure, rpath+".scope_profiles", "empty")
		}
		for j, sp := range rp.ScopeProfiles {
			spath := fmt.Sprintf("%s.scope_profiles[%d]", rpath, j)
			k.kvRefs(spath+".scope.attributes", sp.GetScope().GetAttributes())
			if len(sp.Profiles) == 0 {
				k.add(RuleStructure, spath+".profiles", "empty")
			}
			for n, prof := range sp.Profiles {
				k.profile(fmt.Sprintf("%s.profiles[%d]", spath, n), prof)
			}
		}
	}
}

// kvRefs checks the string-table references of resource and scope
// attributes.
func (k *check) kvRefs(path string, kvs []*commonpb.KeyValue) {
	for i, kv := range kvs {
		p := fmt.Sprintf("%s[%d]", path, i)
		if kv.KeyStrindex != 0 {
			k.str(p+".key_strindex", kv.KeyStrindex)
			if kv.Key != "" {
				k.add(RuleValue, p, "both key and key_strindex set")
			}
		}
		walkStrindex(kv.GetValue(), func(si int32) { k.str(p+".value.string_value_strindex", si) })
	}
}

// walkStrindex calls f with every string_value_strindex in v.
func walkStrindex(v *commonpb.AnyValue, f func(int32)) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValueStrindex:
		f(x.StringValueStrindex)
	case *commonpb.AnyValue_KvlistValue:
		for _, kv := range x.KvlistValue.GetValues() {
			walkStrindex(kv.GetValue(), f)
		}
	case *commonpb.AnyValue_ArrayValue:
		for _, e := range x.ArrayValue.GetValues() {
			walkStrindex(e, f)
		}
	}
}

func (k *check) profile(path string, prof *profilespb.Profile) {
	k.attrs(path, prof.AttributeIndices)
	for _, vt := range []struct {
		name string
		v    *profilespb.ValueType
	}{{"sample_type", prof.SampleType}, {"period_type", prof.PeriodType}} {
		k.str(path+"."+vt.name+".type_strindex", vt.v.GetTypeStrindex())
		k.str(path+"."+vt.name+".unit_strindex", vt.v.GetUnitStrindex())
	}
	start, end := prof.TimeUnixNano, prof.TimeUnixNano+prof.DurationNano
	first := shapeNone
	firstAt := -1
	for i, s := range prof.Samples {
		p := fmt.Sprintf("%s.samples[%d]", path, i)
		k.index(p+".stack_index", s.StackIndex, len(k.d.StackTable), "stack_table")
		k.index(p+".link_index", s.LinkIndex, len(k.d.LinkTable), "link_table")
		k.attrs(p, s.AttributeIndices)
		outside := 0
		for _, t := range s.TimestampsUnixNano {
			if t < start || t >= end {
				if outside == 0 {
					k.add(RuleTimeRange, p+".timestamps_unix_nano", "%d outside the profile's [%d, %d)", t, start, end)
				}
				outside++
			}
		}
		if outside > 1 {
			k.add(RuleTimeRange, p+".timestamps_unix_nano", "%d more outside the profile's range", outside-1)
		}
		sh := k.sampleShape(p, s)
		if sh == shapeNone {
			continue
		}
		if firstAt < 0 {
			first, firstAt = sh, i
		} else if sh != first {
			k.add(RuleShape, p, "%s, but samples[%d] has %s", shapeNames[sh], firstAt, shapeNames[first])
		}
	}
}

func (k *check) sampleShape(p string, s *profilespb.Sample) shape {
	nv, nt := len(s.Values), len(s.TimestampsUnixNano)
	switch {
	case nv > 0 && nt > 0:
		if nv != nt {
			k.add(RuleShape, p, "%d values but %d timestamps", nv, nt)
		}
		return shapeBoth
	case nv > 0:
		if nv != 1 {
			k.add(RuleShape, p, "%d values without timestamps (want exactly one)", nv)
		}
		return shapeValues
	case nt > 0:
		return shapeTimestamps
	}
	k.add(RuleShape, p, "neither values nor timestamps")
	return shapeNone
}

// zero reports a table whose index 0 is missing or not the zero value.
func zero[T any, P interface {
	*T
	proto.Message
}](k *check, name string, table []P) {
	if len(table) == 0 {
		k.add(RuleZeroEntry, name, "empty: index 0 must hold the zero value")
		return
	}
	if !proto.Equal(table[0], P(new(T))) {
		k.add(RuleZeroEntry, name+"[0]", "not the zero value")
	}
}

func (k *check) dictionary() {
	d := k.d
	if len(d.StringTable) == 0 || d.StringTable[0] != "" {
		k.add(RuleZeroEntry, "dictionary.string_table[0]", "must be the empty string")
	}
	zero(k, "dictionary.mapping_table", d.MappingTable)
	zero(k, "dictionary.location_table", d.LocationTable)
	zero(k, "dictionary.function_table", d.FunctionTable)
	zero(k, "dictionary.link_table", d.LinkTable)
	zero(k, "dictionary.stack_table", d.StackTable)
	// An attribute's zero value has no value at all (not an empty one).
	if len(d.AttributeTable) == 0 {
		k.add(RuleZeroEntry, "dictionary.attribute_table", "empty: index 0 must hold the zero value")
	} else if a := d.AttributeTable[0]; a.KeyStrindex != 0 || a.UnitStrindex != 0 || a.GetValue().GetValue() != nil {
		k.add(RuleZeroEntry, "dictionary.attribute_table[0]", "not the zero value")
	}
	for i, m := range d.MappingTable {
		p := fmt.Sprintf("dictionary.mapping_table[%d]", i)
		k.str(p+".filename_strindex", m.FilenameStrindex)
		k.attrs(p, m.AttributeIndices)
		if (m.MemoryStart != 0 || m.MemoryLimit != 0) && m.MemoryStart >= m.MemoryLimit {
			k.add(RuleValue, p, "memory [%#x, %#x) is neither empty nor start < limit", m.MemoryStart, m.MemoryLimit)
		}
	}
	for i, l := range d.LocationTable {
		p := fmt.Sprintf("dictionary.location_table[%d]", i)
		k.index(p+".mapping_index", l.MappingIndex, len(d.MappingTable), "mapping_table")
		k.attrs(p, l.AttributeIndices)
		for j, ln := range l.Lines {
			lp := fmt.Sprintf("%s.lines[%d]", p, j)
			k.index(lp+".function_index", ln.FunctionIndex, len(d.FunctionTable), "function_table")
			if ln.Line < 0 || ln.Column < 0 {
				k.add(RuleValue, lp, "negative line %d or column %d", ln.Line, ln.Column)
			}
		}
	}
	for i, f := range d.FunctionTable {
		p := fmt.Sprintf("dictionary.function_table[%d]", i)
		k.str(p+".name_strindex", f.NameStrindex)
		k.str(p+".system_name_strindex", f.SystemNameStrindex)
		k.str(p+".filename_strindex", f.FilenameStrindex)
		if f.StartLine < 0 {
			k.add(RuleValue, p, "negative start_line %d", f.StartLine)
		}
	}
	for i, l := range d.LinkTable {
		if i == 0 {
			continue
		}
		if len(l.TraceId) != 16 || len(l.SpanId) != 8 {
			k.add(RuleValue, fmt.Sprintf("dictionary.link_table[%d]", i), "trace_id of %d bytes and span_id of %d (want 16 and 8)", len(l.TraceId), len(l.SpanId))
		}
	}
	for i, a := range d.AttributeTable {
		p := fmt.Sprintf("dictionary.attribute_table[%d]", i)
		k.str(p+".key_strindex", a.KeyStrindex)
		k.str(p+".unit_strindex", a.UnitStrindex)
		walkStrindex(a.GetValue(), func(si int32) { k.str(p+".value.string_value_strindex", si) })
	}
	for i, s := range d.StackTable {
		for j, li := range s.LocationIndices {
			k.index(fmt.Sprintf("dictionary.stack_table[%d].location_indices[%d]", i, j), li, len(d.LocationTable), "location_table")
		}
	}
}

// duplicates reports entries equal to an earlier one of the same table.
// Attribute lists compare as sets, since their order carries no meaning.
func (k *check) duplicates() {
	d := k.d
	dups := func(table string, n int, key func(int) string) {
		seen := make(map[string]int, n)
		for i := range n {
			kk := key(i)
			if prev, ok := seen[kk]; ok {
				k.add(RuleDuplicate, fmt.Sprintf("dictionary.%s[%d]", table, i), "equals [%d]", prev)
				continue
			}
			seen[kk] = i
		}
	}
	dups("string_table", len(d.StringTable), func(i int) string { return d.StringTable[i] })
	dups("mapping_table", len(d.MappingTable), func(i int) string {
		m := d.MappingTable[i]
		return fmt.Sprint(m.MemoryStart, m.MemoryLimit, m.FileOffset, m.FilenameStrindex, sortedSet(m.AttributeIndices))
	})
	dups("location_table", len(d.LocationTable), func(i int) string {
		l := d.LocationTable[i]
		var b strings.Builder
		fmt.Fprint(&b, l.MappingIndex, l.Address, sortedSet(l.AttributeIndices))
		for _, ln := range l.Lines {
			fmt.Fprint(&b, ";", ln.FunctionIndex, ln.Line, ln.Column)
		}
		return b.String()
	})
	dups("function_table", len(d.FunctionTable), func(i int) string {
		f := d.FunctionTable[i]
		return fmt.Sprint(f.NameStrindex, f.SystemNameStrindex, f.FilenameStrindex, f.StartLine)
	})
	dups("link_table", len(d.LinkTable), func(i int) string {
		return string(d.LinkTable[i].TraceId) + "/" + string(d.LinkTable[i].SpanId)
	})
	dups("stack_table", len(d.StackTable), func(i int) string { return fmt.Sprint(d.StackTable[i].LocationIndices) })
	dups("attribute_table", len(d.AttributeTable), func(i int) string {
		a := d.AttributeTable[i]
		v, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a.GetValue())
		return fmt.Sprint(a.KeyStrindex, a.UnitStrindex, string(v))
	})
}

func sortedSet(idx []int32) string {
	s := slices.Clone(idx)
	slices.Sort(s)
	return fmt.Sprint(s)
}
