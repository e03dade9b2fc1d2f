package live

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// TestTraceClipsToSpanTime links samples to one exported span, some
// inside its start and end and some after it (a goroutine that inherited
// the span's labels and outlived it), and checks the view, the flame
// graph and the trace list count only the part inside, and count the rest
// apart.
func TestTraceClipsToSpanTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tid, sid := [16]byte{7}, [8]byte{9}
	link := profile.Link{TraceID: tid, SpanID: sid}
	s := NewStore(Limits{})
	s.AddSpans([]Span{{TraceID: tid, SpanID: sid, Name: "call", Start: t0, End: t0.Add(100 * time.Millisecond)}})
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	frames := []profile.Frame{{Function: "work"}}
	p := &profile.Profile{Frequency: 100, Processes: map[uint32]*profile.Process{1: {PID: 1}}} // period 10 ms
	add := func(k profile.Kind, thread uint32, at time.Duration, v int64) {
		p.Samples = append(p.Samples, profile.Sample{Kind: k, PID: 1, TID: thread, Link: link, Time: t0.Add(at), Value: v, Frames: frames})
	}
	add(profile.OnCPU, 2, ms(10), 1)               // inside: 10 ms
	add(profile.OnCPU, 2, ms(50), 2)               // inside: 20 ms
	add(profile.OnCPU, 3, ms(900), 1)              // long after the end: outside
	add(profile.OffCPU, 2, ms(90), int64(ms(30)))  // 60-90 ms: inside
	add(profile.OffCPU, 2, ms(120), int64(ms(40))) // 80-120 ms: 20 ms inside (plus the 1 ms slack)
	add(profile.OffCPU, 0, ms(60), int64(ms(5)))   // parked goroutines at 60 ms: inside
	add(profile.OffCPU, 0, ms(400), int64(ms(5)))  // parked goroutines at 400 ms: outside
	add(profile.OffCPU, 4, ms(-50), int64(ms(20))) // a wait before the span began: outside
	s.AddProfile(p)

	tv, ok := s.Trace(tid)
	if !ok || len(tv.Spans) != 1 {
		t.Fatalf("trace view: %v %+v", ok, tv.Spans)
	}
	v := tv.Spans[0]
	wantOff := int64(ms(30) + ms(21) + ms(5))
	if v.OnCPUNs != int64(ms(30)) || v.OffCPUNs != wantOff || v.Samples != 5 {
		t.Errorf("inside: on %v off %v samples %d, want 30ms, %v, 5", time.Duration(v.OnCPUNs), time.Duration(v.OffCPUNs), v.Samples, time.Duration(wantOff))
	}
	wantOut := int64(ms(10) + ms(19) + ms(5) + ms(20))
	if v.OutsideNs != wantOut || v.OutsideSamples != 3 {
		t.Errorf("outside: %v in %d samples, want %v in 3", time.Duration(v.OutsideNs), v.OutsideSamples, time.Duration(wantOut))
	}
	if v.OnCPUNs+v.OffCPUNs+v.OutsideNs != int64(ms(40)+ms(30)+ms(40)+ms(10)+ms(20)) {
		t.Errorf("inside and outside do not add up to what was sent: %+v", v)
	}
	threads := map[uint32]ThreadTime{}
	for _, th := range v.ByThread {
		threads[th.TID] = th
	}
	if th := threads[2]; th.OnCPUNs != int64(ms(30)) || th.OffCPUNs != int64(ms(51)) || len(threads) != 2 {
		t.Errorf("by thread: %+v", v.ByThread)
	}
	if f := s.SpanFlame(tid, sid, profile.OffCPU); f.Value != wantOff {
		t.Errorf("off-CPU flame graph weighs %v, the view %v", time.Duration(f.Value), time.Duration(wantOff))
	}
	if f := s.SpanFlame(tid, sid, profile.OnCPU); f.Value != int64(ms(30)) {
		t.Errorf("on-CPU flame graph weighs %v, want 30ms", time.Duration(f.Value))
	}
	if l := s.Traces(0); len(l) != 1 || l[0].OnCPUNs != v.OnCPUNs || l[0].OffCPUNs != v.OffCPUNs {
		t.Errorf("trace list %+v, view on %d off %d", l, v.OnCPUNs, v.OffCPUNs)
	}
}

// TestLogEvictions checks that what left the window is logged once, with
// its reason, and nothing is logged when nothing left.
func TestLogEvictions(t *testing.T) {
	var buf strings.Builder
	s := NewStore(Limits{MaxSamples: 5})
	r := NewReceiver(s, slog.New(slog.NewTextHandler(&buf, nil)))
	batch := &profile.Profile{Frequency: 100}
	for range 4 {
		batch.Samples = append(batch.Samples, profile.Sample{Value: 1})
	}
	s.AddProfile(batch)
	s.AddProfile(batch) // 8 > 5: the first batch goes
	st := r.logEvictions(Stats{})
	if got := buf.String(); !strings.Contains(got, "samples=4") || !strings.Contains(got, "by_count=4") {
		t.Errorf("log %q, want 4 samples evicted by count", got)
	}
	buf.Reset()
	r.logEvictions(st)
	if buf.Len() != 0 {
		t.Errorf("logged %q with nothing evicted", buf.String())
	}
}
