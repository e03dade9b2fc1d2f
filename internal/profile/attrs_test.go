package profile

import (
	"slices"
	"testing"
)

func TestAttrsRoundTrip(t *testing.T) {
	long := string(make([]byte, 300)) // a length that takes two varint bytes
	for _, kv := range [][]Attr{
		nil,
		{{"http.route", "/items/3"}},
		{{"a", ""}, {"b", "x\x00y"}, {"c", long}},
	} {
		got := MakeAttrs(kv).All()
		if !slices.Equal(got, kv) {
			t.Errorf("MakeAttrs(%q).All() = %q", kv, got)
		}
	}
	if MakeAttrs([]Attr{{"a", "bc"}}) == MakeAttrs([]Attr{{"ab", "c"}}) {
		t.Error("different attributes encode alike")
	}
}

// TestAggregateKeepsAttrsApart: attributes are part of a sample's
// identity, so samples differing only in them are never merged.
func TestAggregateKeepsAttrsApart(t *testing.T) {
	get := MakeAttrs([]Attr{{"http.request.method", "GET"}})
	post := MakeAttrs([]Attr{{"http.request.method", "POST"}})
	s := Sample{PID: 1, TID: 2, Frames: []Frame{{Address: 0x1000, Function: "f"}}, Value: 1,
		Link: Link{TraceID: [16]byte{1}, SpanID: [8]byte{2}}}
	p := &Profile{}
	for _, a := range []Attrs{get, post, get, ""} {
		s.Attrs = a
		p.Samples = append(p.Samples, s)
	}
	agg := NewAggregate(p)
	if len(agg.Groups) != 3 {
		t.Fatalf("%d groups, want 3 (GET twice, POST, none)", len(agg.Groups))
	}
	for _, g := range agg.Groups {
		want := int64(1)
		if g.Attrs == get {
			want = 2
		}
		if g.Total != want {
			t.Errorf("group %q: total %d, want %d", g.Attrs.All(), g.Total, want)
		}
	}
}
