package collect

import (
	"fmt"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// TestAttrs: a record's raw attributes become the sample's, named by its
// process's key map; unnamed keys, malformed attributes and sets past the
// bound are counted, and those samples keep their link.
func TestAttrs(t *testing.T) {
	keys := map[uint32][]string{100: {"http.request.method", "http.route", "thread.id"}}
	c := New(Options{Frequency: 99, NoLeafRecovery: true, Kernel: testKernel(), MaxAttrSets: 2,
		ContextKeys: func(pid uint32) []string { return keys[pid] }})
	link := sampler.Link{TraceID: [16]byte{1}, SpanID: [8]byte{2}}
	rec := func(pid uint32, raw string) *sampler.Record {
		return &sampler.Record{PID: pid, TID: pid, Value: 1, Time: time.Unix(1700000000, 0), Link: link,
			UserStack: []uint64{0x401000}, CtxAttrs: []byte(raw)}
	}
	records := []*sampler.Record{
		rec(100, "\x00\x03GET\x01\x02/a"),          // set 1
		rec(100, "\x00\x04POST"),                   // set 2
		rec(100, "\x00\x03GET\x01\x02/a\x07\x01x"), // set 1 again, one key unnamed
		rec(100, "\x00\x03PUT"),                    // a third set: past the bound
		rec(100, "\x00\x09GET"),                    // malformed
		rec(100, "\x02\x01x"),                      // thread.id: the exporters' own
		rec(200, "\x00\x03GET"),                    // no key map: unnamed
	}
	for _, r := range records {
		c.Add(r)
	}
	prof := c.Build(time.Unix(1700000001, 0))
	want := []string{
		"[{http.request.method GET} {http.route /a}]", "[{http.request.method POST}]",
		"[{http.request.method GET} {http.route /a}]", "[]", "[]", "[]", "[]",
	}
	if len(prof.Samples) != len(want) {
		t.Fatalf("%d samples, want %d", len(prof.Samples), len(want))
	}
	for i, s := range prof.Samples {
		if got := fmt.Sprint(s.Attrs.All()); got != want[i] {
			t.Errorf("sample %d: attributes %s, want %s", i, got, want[i])
		}
		if s.Link != profile.Link(link) {
			t.Errorf("sample %d lost its link", i)
		}
	}
	st := c.Stats()
	if st.CtxAttrsUnnamed != 3 || st.CtxAttrsMalformed != 1 || st.CtxAttrsCut != 1 {
		t.Errorf("unnamed %d malformed %d cut %d, want 3 1 1", st.CtxAttrsUnnamed, st.CtxAttrsMalformed, st.CtxAttrsCut)
	}
	// The bound is per interval: the next one starts afresh.
	c.Add(rec(100, "\x00\x03PUT"))
	if s := c.Build(time.Unix(1700000002, 0)).Samples; len(s) != 1 || fmt.Sprint(s[0].Attrs.All()) != "[{http.request.method PUT}]" {
		t.Errorf("next interval: %+v", s)
	}
}
