package conform

import (
	"fmt"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
)

// refs marks the referenced entries of one table; index 0, the zero
// value every table must start with, counts as referenced.
type refs []bool

func newRefs(n int) refs {
	r := make(refs, n)
	if n > 0 {
		r[0] = true
	}
	return r
}

// mark ignores indices out of range: the index rule reports those.
func (r refs) mark(i int32) {
	if i >= 0 && int(i) < len(r) {
		r[i] = true
	}
}

func (r refs) markAll(idx []int32) {
	for _, i := range idx {
		r.mark(i)
	}
}

// orphans reports dictionary entries nothing refers to. References are
// followed from the profiles down (a table entry that is itself an orphan
// still counts as referring, as profcheck counts them), so that one
// orphan is reported once, in its own table.
func (k *check) orphans(data *profilespb.ProfilesData) {
	d := k.d
	strs := newRefs(len(d.StringTable))
	attrs := newRefs(len(d.AttributeTable))
	maps := newRefs(len(d.MappingTable))
	funcs := newRefs(len(d.FunctionTable))
	locs := newRefs(len(d.LocationTable))
	stacks := newRefs(len(d.StackTable))
	links := newRefs(len(d.LinkTable))

	kvs := func(list []*commonpb.KeyValue) {
		if k.c.Profcheck {
			return
		}
		for _, kv := range list {
			strs.mark(kv.KeyStrindex)
			walkStrindex(kv.GetValue(), strs.mark)
		}
	}
	for _, rp := range data.ResourceProfiles {
		kvs(rp.GetResource().GetAttributes())
		for _, sp := range rp.ScopeProfiles {
			kvs(sp.GetScope().GetAttributes())
			for _, prof := range sp.Profiles {
				strs.mark(prof.GetSampleType().GetTypeStrindex())
				strs.mark(prof.GetSampleType().GetUnitStrindex())
				strs.mark(prof.GetPeriodType().GetTypeStrindex())
				strs.mark(prof.GetPeriodType().GetUnitStrindex())
				attrs.markAll(prof.AttributeIndices)
				for _, s := range prof.Samples {
					stacks.mark(s.StackIndex)
					links.mark(s.LinkIndex)
					attrs.markAll(s.AttributeIndices)
				}
			}
		}
	}
	for _, s := range d.StackTable {
		locs.markAll(s.LocationIndices)
	}
	for _, l := range d.LocationTable {
		maps.mark(l.MappingIndex)
		attrs.markAll(l.AttributeIndices)
		for _, ln := range l.Lines {
			funcs.mark(ln.FunctionIndex)
		}
	}
	for _, m := range d.MappingTable {
		strs.mark(m.FilenameStrindex)
		attrs.markAll(m.AttributeIndices)
	}
	for _, f := range d.FunctionTable {
		strs.mark(f.NameStrindex)
		strs.mark(f.SystemNameStrindex)
		strs.mark(f.FilenameStrindex)
	}
	for _, a := range d.AttributeTable {
		strs.mark(a.KeyStrindex)
		strs.mark(a.UnitStrindex)
		if !k.c.Profcheck {
			walkStrindex(a.GetValue(), strs.mark)
		}
	}
	for _, t := range []struct {
		name string
		r    refs
	}{
		{"string_table", strs}, {"attribute_table", attrs}, {"mapping_table", maps},
		{"function_table", funcs}, {"location_table", locs}, {"stack_table", stacks}, {"link_table", links},
	} {
		for i, used := range t.r {
			if !used {
				k.add(RuleOrphan, fmt.Sprintf("dictionary.%s[%d]", t.name, i), "referenced by nothing")
			}
		}
	}
}
