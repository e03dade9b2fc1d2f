package conform_test

import (
	"testing"

	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/export/otlp/conform"
)

// good is the encoding of the exporters' shared fixture, which every rule
// accepts (TestOutputsConform in package otlp asserts that).
func good(t *testing.T) *profilespb.ProfilesData {
	t.Helper()
	buf, err := otlp.EncodeProto(otlp.Build(exporttest.Small()))
	if err != nil {
		t.Fatal(err)
	}
	var d profilespb.ProfilesData
	if err := proto.Unmarshal(buf, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestRulesCatchViolations breaks one invariant at a time in a conformant
// message and asserts the rule that must catch it does, and only the
// rules expected.
func TestRulesCatchViolations(t *testing.T) {
	prof := func(d *profilespb.ProfilesData) *profilespb.Profile {
		return d.ResourceProfiles[0].ScopeProfiles[0].Profiles[0]
	}
	tests := []struct {
		name   string
		break_ func(d *profilespb.ProfilesData)
		want   map[conform.Rule]int
	}{
		{"timestamp after the range", func(d *profilespb.ProfilesData) {
			p := prof(d)
			p.Samples[0].TimestampsUnixNano[0] = p.TimeUnixNano + p.DurationNano // end is exclusive
		}, map[conform.Rule]int{conform.RuleTimeRange: 1}},
		{"timestamp before the range", func(d *profilespb.ProfilesData) {
			p := prof(d)
			p.Samples[0].TimestampsUnixNano[0] = p.TimeUnixNano - 1
		}, map[conform.Rule]int{conform.RuleTimeRange: 1}},
		{"values and timestamps differ in length", func(d *profilespb.ProfilesData) {
			s := prof(d).Samples[0]
			s.Values = append(s.Values, 1)
		}, map[conform.Rule]int{conform.RuleShape: 1}},
		{"two values without timestamps, shape change", func(d *profilespb.ProfilesData) {
			s := prof(d).Samples[1]
			s.TimestampsUnixNano = nil
			s.Values = []int64{1, 1}
		}, map[conform.Rule]int{conform.RuleShape: 2}},
		{"empty sample", func(d *profilespb.ProfilesData) {
			s := prof(d).Samples[0]
			s.TimestampsUnixNano, s.Values = nil, nil
		}, map[conform.Rule]int{conform.RuleShape: 1}},
		{"stack index out of range", func(d *profilespb.ProfilesData) {
			prof(d).Samples[0].StackIndex = int32(len(d.Dictionary.StackTable))
		}, map[conform.Rule]int{conform.RuleIndex: 1}},
		{"duplicate attribute key on a sample", func(d *profilespb.ProfilesData) {
			s := prof(d).Samples[0]
			s.AttributeIndices = append(s.AttributeIndices, s.AttributeIndices[0])
		}, map[conform.Rule]int{conform.RuleAttrKeys: 1}},
		{"duplicate string", func(d *profilespb.ProfilesData) {
			d.Dictionary.StringTable = append(d.Dictionary.StringTable, d.Dictionary.StringTable[1])
		}, map[conform.Rule]int{conform.RuleDuplicate: 1, conform.RuleOrphan: 1}},
		{"orphan string", func(d *profilespb.ProfilesData) {
			d.Dictionary.StringTable = append(d.Dictionary.StringTable, "nobody uses this")
		}, map[conform.Rule]int{conform.RuleOrphan: 1}},
		{"orphan function", func(d *profilespb.ProfilesData) {
			d.Dictionary.FunctionTable = append(d.Dictionary.FunctionTable, &profilespb.Function{NameStrindex: 1, StartLine: 99})
		}, map[conform.Rule]int{conform.RuleOrphan: 1}},
		{"duplicate stack", func(d *profilespb.ProfilesData) {
			d.Dictionary.StackTable = append(d.Dictionary.StackTable, d.Dictionary.StackTable[1])
			prof(d).Samples[0].StackIndex = int32(len(d.Dictionary.StackTable) - 1)
		}, map[conform.Rule]int{conform.RuleDuplicate: 1}},
		{"zero entry not zero", func(d *profilespb.ProfilesData) {
			d.Dictionary.MappingTable[0].MemoryLimit = 1
		}, map[conform.Rule]int{conform.RuleZeroEntry: 1}},
		{"no empty string at 0", func(d *profilespb.ProfilesData) {
			d.Dictionary.StringTable[0] = "x"
		}, map[conform.Rule]int{conform.RuleZeroEntry: 1}},
		{"short span id", func(d *profilespb.ProfilesData) {
			d.Dictionary.LinkTable[1].SpanId = d.Dictionary.LinkTable[1].SpanId[:4]
		}, map[conform.Rule]int{conform.RuleValue: 1}},
		{"mapping limit below start", func(d *profilespb.ProfilesData) {
			for _, m := range d.Dictionary.MappingTable {
				if m.MemoryStart != 0 {
					m.MemoryLimit = m.MemoryStart
					return
				}
			}
		}, map[conform.Rule]int{conform.RuleValue: 1}},
		{"location to a missing function", func(d *profilespb.ProfilesData) {
			for _, l := range d.Dictionary.LocationTable {
				if len(l.Lines) > 0 {
					l.Lines[0].FunctionIndex = -1
					return
				}
			}
		}, map[conform.Rule]int{conform.RuleIndex: 1, conform.RuleOrphan: 1}}, // the function it named
		{"no profiles", func(d *profilespb.ProfilesData) {
			d.ResourceProfiles = nil
		}, nil}, // structure plus every now-unreferenced entry; checked below
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := good(t)
			tc.break_(d)
			err := conform.Checker{}.Check(d)
			if err == nil {
				t.Fatal("no violation found")
			}
			got := err.(*conform.Report).Rules()
			if tc.want == nil {
				if got[conform.RuleStructure] != 1 || got[conform.RuleOrphan] == 0 {
					t.Fatalf("got %v, want 1 structure violation and orphans", got)
				}
				return
			}
			for r, n := range tc.want {
				if got[r] != n {
					t.Errorf("rule %s: %d violations, want %d\n%v", r, got[r], n, err)
				}
			}
			for r := range got {
				if _, ok := tc.want[r]; !ok {
					t.Errorf("unexpected rule %s broken:\n%v", r, err)
				}
			}
		})
	}
}

// TestResourceStringRefs: a string used only by a resource attribute's
// key_strindex is referenced as the protocol defines it, but not as
// profcheck counts; the two modes must differ exactly there.
func TestResourceStringRefs(t *testing.T) {
	d := good(t)
	kv := d.ResourceProfiles[0].Resource.Attributes[0]
	d.Dictionary.StringTable = append(d.Dictionary.StringTable, kv.Key)
	kv.Key, kv.KeyStrindex = "", int32(len(d.Dictionary.StringTable)-1)
	if err := (conform.Checker{}).Check(d); err != nil {
		t.Errorf("protocol mode: %v", err)
	}
	err := conform.Checker{Profcheck: true}.Check(d)
	if got := err.(*conform.Report).Rules(); got[conform.RuleOrphan] != 1 || len(got) != 1 {
		t.Errorf("profcheck mode: got %v, want one orphan: %v", got, err)
	}
}
