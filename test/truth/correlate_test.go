package truth

import (
	"os"
	"path/filepath"
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

// A goroutine's span on another thread is its sample's only while the
// goroutine was bound to no thread (Span.Unlocked), read from the Go
// service's 10-field lines.
func TestUnlockedWindow(t *testing.T) {
	const ms = 1_000_000
	path := filepath.Join(t.TempDir(), "truth")
	lines := "7 2 t1 child 50000000 90000000 childWork 52000000 88000000 52000000\n" +
		"8 1 t1 parent 40000000 95000000 work 41000000 94000000 0\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	spans, err := ReadSpans(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans[2]) != 1 || spans[2][0].Unlocked != 52*ms || spans[2][0].Held != 52*ms || spans[1][0].Unlocked != 0 {
		t.Fatalf("ReadSpans = %+v", spans)
	}
	sample := func(tid, span string, ts uint64) Sample {
		return Sample{Attrs: map[string]string{"thread.id": tid}, Trace: "t1", Span: span, Times: []uint64{ts}}
	}
	c := MeasureCorrelation([]Sample{
		sample("1", "child", 51*ms),        // right: the child before it locked thread 2
		sample("1", "child", 52*ms+30_000), // right: within 50µs of that
		sample("1", "child", 60*ms),        // wrong: the child was locked to thread 2
		sample("1", "child", 49*ms),        // wrong: before the child existed
		sample("1", "parent", 60*ms),       // right
		sample("2", "parent", 45*ms),       // wrong: the parent is locked, on thread 1
	}, spans)
	if c.Linked != 6 || c.LinkedRight != 3 || c.LinkedUnlocked != 2 {
		t.Errorf("%d of %d links right (%d on another thread), want 3 of 6 (2)", c.LinkedRight, c.Linked, c.LinkedUnlocked)
	}
}
