package profile

import (
	"reflect"
	"testing"
	"time"
)

func TestNewAggregate(t *testing.T) {
	m := &Mapping{Start: 0x1000, Limit: 0x2000, Path: "/bin/a"}
	f1 := Frame{Address: 0x1100, Function: "leaf", Mapping: m}
	f2 := Frame{Address: 0x1200, Function: "root", Mapping: m}
	t0 := time.Unix(100, 0)
	span := Link{SpanID: [8]byte{1}}
	p := &Profile{Samples: []Sample{
		{PID: 2, TID: 2, Frames: []Frame{f1, f2}, Time: t0, Value: 1},
		{PID: 1, TID: 1, Frames: []Frame{f1, f2}, Time: t0.Add(1), Value: 1},
		{PID: 1, TID: 1, Frames: []Frame{f1, f2}, Time: t0.Add(2), Value: 1, Link: span},
		{PID: 1, TID: 1, Frames: []Frame{f1, f2}, Time: t0.Add(3), Value: 2},
		{PID: 1, TID: 1, Kind: OffCPU, Frames: []Frame{f1, f2}, Value: 500, State: "S"},
		{PID: 1, TID: 1, Frames: []Frame{f2}, Time: t0.Add(4), Value: 1},
	}}
	a := NewAggregate(p)
	if len(a.Frames) != 2 || len(a.Stacks) != 2 {
		t.Fatalf("got %d frames, %d stacks; want 2, 2", len(a.Frames), len(a.Stacks))
	}
	type summary struct {
		PID    uint32
		Kind   Kind
		Stack  int32
		Linked bool
		Times  []uint64
		Total  int64
	}
	var got []summary
	for _, g := range a.Groups {
		got = append(got, summary{g.PID, g.Kind, g.Stack, !g.Link.IsZero(), g.Times, g.Total})
	}
	n := uint64(t0.UnixNano())
	want := []summary{
		{1, OnCPU, 0, false, []uint64{n + 1, n + 3}, 3},
		{1, OnCPU, 0, true, []uint64{n + 2}, 1},
		{1, OnCPU, 1, false, []uint64{n + 4}, 1},
		{1, OffCPU, 0, false, []uint64{0}, 500},
		{2, OnCPU, 0, false, []uint64{n}, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(a.PIDs(), []uint32{1, 2}) {
		t.Errorf("PIDs = %v", a.PIDs())
	}
}

func TestLocations(t *testing.T) {
	a := &Aggregate{Frames: []Frame{{Inlined: true}, {Inlined: true}, {}, {}, {Inlined: true}}}
	tests := []struct {
		name  string
		stack []int32
		want  [][]int32
	}{
		{"plain", []int32{2, 3}, [][]int32{{2}, {3}}},
		{"inlined chain", []int32{0, 1, 2, 3}, [][]int32{{0, 1, 2}, {3}}},
		{"dangling inlined root", []int32{3, 4}, [][]int32{{3}, {4}}},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := a.Locations(tt.stack); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDisplayName(t *testing.T) {
	lib := &Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x2000, Path: "/usr/lib/libx.so"}
	tests := []struct {
		name  string
		frame Frame
		want  string
	}{
		{"symbolized", Frame{Function: "main", Mapping: lib}, "main"},
		{"user offset includes file offset", Frame{Address: 0x7f0000000010, Mapping: lib}, "libx.so+0x2010"},
		{"kernel mapping", Frame{Address: 0xffffffff81000010, Mapping: &Mapping{Kernel: true}}, "[kernel.kallsyms]+0xffffffff81000010"},
		{"unmapped kernel address", Frame{Address: 0xffffffff81000010}, "[kernel.kallsyms]+0xffffffff81000010"},
		{"no mapping", Frame{Address: 0x1234}, "0x1234"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.frame.DisplayName(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestAggregatorKeepsNothingOfTheSample feeds an Aggregator through one
// Sample variable overwritten for every event, as a producer that does
// not hold its samples does: the result must equal NewAggregate of the
// same samples held in a slice.
func TestAggregatorKeepsNothingOfTheSample(t *testing.T) {
	m := &Mapping{Start: 0x1000, Limit: 0x2000, Path: "/bin/a"}
	stacks := [][]Frame{
		{{Address: 0x1100, Function: "leaf", Mapping: m}, {Address: 0x1200, Function: "root", Mapping: m}},
		{{Address: 0x1300, Function: "wait", Mapping: m}},
	}
	p := &Profile{}
	for i := range 50 {
		p.Samples = append(p.Samples, Sample{
			Kind: Kind(i % 2), PID: uint32(1 + i%3), TID: uint32(10 + i%4), ThreadName: []string{"a", "b"}[i%2],
			Frames: stacks[i%len(stacks)], Link: Link{SpanID: [8]byte{byte(i % 5)}},
			Time: time.Unix(100, int64(i)), Value: int64(i + 1), State: []string{"", "S"}[i%2],
		})
	}
	g := NewAggregator()
	var s Sample
	for i := range p.Samples {
		s = p.Samples[i]
		g.Add(&s)
	}
	s = Sample{Frames: []Frame{{Address: 0xdead}}} // what a later sample would leave behind
	if g.Samples() != len(p.Samples) {
		t.Errorf("Samples() = %d, want %d", g.Samples(), len(p.Samples))
	}
	if got, want := g.Finish(), NewAggregate(p); !reflect.DeepEqual(got, want) {
		t.Errorf("aggregate of streamed samples differs:\n got %+v\nwant %+v", got, want)
	}
}
