package truth

import (
	"strings"
	"testing"
)

func TestDescribeWrong(t *testing.T) {
	const ms = 1_000_000
	spans := map[int][]Span{
		1: {{TID: 1, Trace: "t1", Span: "a", Start: 10 * ms, End: 20 * ms, Held: 10 * ms, Released: 20 * ms}},
		2: {{TID: 2, Trace: "t1", Span: "b", Start: 30 * ms, End: 40 * ms, Held: 30 * ms, Released: 40 * ms}},
	}
	sample := func(tid, span string, ts uint64) Sample {
		return Sample{Attrs: map[string]string{"thread.id": tid}, Trace: "t1", Span: span, Times: []uint64{ts}}
	}
	samples := []Sample{
		sample("1", "a", 15*ms),        // right
		sample("1", "a", 20*ms+30_000), // right: within 50µs of the end
		sample("1", "a", 22*ms),        // 2 ms after its window
		sample("1", "b", 35*ms),        // b ran on thread 2
		sample("1", "c", 15*ms),        // no such span
		{Attrs: map[string]string{"thread.id": "1"}, Times: []uint64{15 * ms}}, // unlinked
	}
	c := MeasureCorrelation(samples, spans)
	if wrong := c.Linked - c.LinkedRight; wrong != 3 {
		t.Fatalf("%d wrong links, want 3", wrong)
	}
	got := DescribeWrong(samples, spans, 10)
	for _, want := range []string{
		"[tid 1, span a: +2000µs from its nearest window on this thread",
		"[tid 1, span b: not on this thread; on tid 2, +0µs from its window there",
		"[tid 1, span c: no span has these ids",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("DescribeWrong = %q, want it to hold %q", got, want)
		}
	}
	if n := strings.Count(got, "[tid"); n != 3 {
		t.Errorf("DescribeWrong named %d samples, want the 3 wrong ones: %q", n, got)
	}
	if n := strings.Count(DescribeWrong(samples, spans, 2), "[tid"); n != 2 {
		t.Errorf("DescribeWrong with max 2 named %d samples", n)
	}
}
