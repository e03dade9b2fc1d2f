package chstore

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore/chtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// input is a trace of two services on two hosts: exported spans, on-CPU
// ticks inside and outside them, thread waits crossing a span's end,
// goroutine waits (tid 0), a span no export carried, attributes, kernel
// and unsymbolized frames, and samples of no span.
func input(t0 time.Time) ([]live.Span, []*profile.Profile) {
	tid := [16]byte{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	root, work, call, ghost := [8]byte{1}, [8]byte{2}, [8]byte{3}, [8]byte{4}
	spans := []live.Span{
		{TraceID: tid, SpanID: root, Name: "GET /checkout", Service: "front", Kind: "Server", Status: "Ok", Start: t0, End: t0.Add(600 * time.Millisecond)},
		{TraceID: tid, SpanID: work, ParentSpanID: root, Name: "price", Service: "front", Kind: "Internal", Status: "Unset",
			Start: t0.Add(10 * time.Millisecond), End: t0.Add(300 * time.Millisecond)},
		{TraceID: tid, SpanID: call, ParentSpanID: root, Name: "GET /stock", Service: "stock", Kind: "Server", Status: "Error",
			Start: t0.Add(310 * time.Millisecond), End: t0.Add(590 * time.Millisecond)},
	}
	kmap := &profile.Mapping{Path: "[kernel.kallsyms]", Kernel: true, Start: 0xffffffff81000000, Limit: 0xffffffff82000000}
	exe := &profile.Mapping{Path: "/usr/bin/front", BuildID: "abcdef", Start: 0x400000, Limit: 0x500000, Offset: 0x1000}
	lib := &profile.Mapping{Path: "/usr/lib/libx.so", HTLHash: "0123456789abcdef", Start: 0x7f0000000000, Limit: 0x7f0000100000}
	loop := []profile.Frame{{Function: "loop", File: "a.c", Line: 12, Address: 0x401000, Mapping: exe},
		{Function: "inl", Inlined: true, Address: 0x401000, Mapping: exe}, {Function: "main", Address: 0x402000, Mapping: exe}}
	wait := []profile.Frame{{Function: "schedule", Address: 0xffffffff81001000, Mapping: kmap},
		{Address: 0x7f0000001234, Mapping: lib}, {Function: "libx+0x1200", NoSymbol: true, Address: 0x7f0000001200, Mapping: lib},
		{Function: "main", Address: 0x402000, Mapping: exe}}
	gor := []profile.Frame{{Function: "runtime.gopark"}, {Function: "main.handler"}}
	front := &profile.Process{PID: 42, ExeName: "front", ServiceName: "front", Attributes: map[string]string{"host.name": "node-a"}}
	stock := &profile.Process{PID: 42, ExeName: "stock", ServiceName: "stock", Attributes: map[string]string{"host.name": "node-b"}}
	link := func(s [8]byte) profile.Link { return profile.Link{TraceID: tid, SpanID: s} }
	attrs := profile.MakeAttrs([]profile.Attr{{Key: "http.route", Value: "/checkout"}, {Key: "tenant", Value: "t1"}})

	p1 := &profile.Profile{Start: t0, End: t0.Add(time.Second), Frequency: 100, Processes: map[uint32]*profile.Process{42: front}}
	for i := range 35 {
		// 30 inside price (20..310 ms), 5 after it ended.
		p1.Samples = append(p1.Samples, profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 43, ThreadName: "worker", Frames: loop, Value: 1,
			Link: link(work), Time: t0.Add(time.Duration(20+i*9) * time.Millisecond), Attrs: attrs})
	}
	p1.Samples = append(p1.Samples,
		profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 43, ThreadName: "worker", Frames: wait, Value: 100e6, State: "S",
			Reason: "futex_wait_queue", Link: link(work), Time: t0.Add(350 * time.Millisecond)},
		profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 0, Frames: gor, Value: 20e6, State: "S", Reason: "chan receive",
			Link: link(root), Time: t0.Add(400 * time.Millisecond)},
		profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 0, Frames: gor, Value: 20e6, State: "S", Reason: "chan receive",
			Link: link(root), Time: t0.Add(400 * time.Millisecond)},
		profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 44, Frames: loop, Value: 1, Time: t0.Add(5 * time.Millisecond)},
		profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 45, Frames: loop, Value: 1, Link: link(ghost), Time: t0.Add(50 * time.Millisecond)},
	)
	p2 := &profile.Profile{Start: t0, End: t0.Add(time.Second), Frequency: 250, Processes: map[uint32]*profile.Process{42: stock}}
	for i := range 40 {
		p2.Samples = append(p2.Samples, profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 50, ThreadName: "stock-main", Frames: loop, Value: 1,
			Link: link(call), Time: t0.Add(time.Duration(320+i*6) * time.Millisecond)})
	}
	p2.Samples = append(p2.Samples, profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 50, Frames: wait, Value: 50e6, State: "D",
		Reason: "io_schedule", Link: link(call), Time: t0.Add(580 * time.Millisecond)})
	return spans, []*profile.Profile{p1, p2}
}

func newStore(t *testing.T, srv *chtest.Server, db string, opts Options) *Store {
	t.Helper()
	target, err := ParseURL(srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	s := New(NewHTTPConn(target, 10*time.Second), target, opts, quiet)
	if err := s.EnsureSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameViews checks that b answers every query as a does (the window
// line aside).
func sameViews(t *testing.T, a, b live.Backend, id [16]byte, spans []live.Span) {
	t.Helper()
	ta, oka, err := a.TraceView(id)
	if err != nil || !oka {
		t.Fatalf("reference trace: ok %v, err %v", oka, err)
	}
	tb, okb, err := b.TraceView(id)
	if err != nil || !okb {
		t.Fatalf("clickhouse trace: ok %v, err %v", okb, err)
	}
	ta.Window, tb.Window = live.Stats{}, live.Stats{}
	if ja, jb := jsonOf(t, ta), jsonOf(t, tb); ja != jb {
		t.Errorf("trace views differ:\nin-memory: %s\nclickhouse: %s", ja, jb)
	}
	la, _ := a.TraceList(0)
	lb, err := b.TraceList(0)
	if err != nil {
		t.Fatal(err)
	}
	if ja, jb := jsonOf(t, la), jsonOf(t, lb); ja != jb {
		t.Errorf("trace lists differ:\nin-memory: %s\nclickhouse: %s", ja, jb)
	}
	for _, sv := range ta.Spans {
		var sid [8]byte
		copy(sid[:], unhex(sv.SpanID))
		for _, k := range []profile.Kind{profile.OnCPU, profile.OffCPU} {
			fa, _ := a.Flame(id, sid, k)
			fb, err := b.Flame(id, sid, k)
			if err != nil {
				t.Fatal(err)
			}
			if ja, jb := jsonOf(t, fa), jsonOf(t, fb); ja != jb {
				t.Errorf("span %s %v flame graphs differ:\nin-memory: %s\nclickhouse: %s", sv.SpanID, k, ja, jb)
			}
		}
	}
}

var traceID = [16]byte{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// TestSameAsWindow feeds the same exports to the in-memory window and to
// ClickHouse and compares every answer. It also checks that a retried
// export (to the same instance and to another one) is not counted twice,
// and that a new instance on the same database (a restarted serve) sees
// it all.
func TestSameAsWindow(t *testing.T) {
	srv := chtest.Start(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	spans, profs := input(t0)
	mem := live.NewStore(live.Limits{})
	a := newStore(t, srv, "same", Options{})
	b := newStore(t, srv, "same", Options{})
	mem.AddSpans(spans)
	for _, p := range profs {
		mem.AddProfile(p)
	}
	// Spans through a, profiles through b and a retry of each through
	// the other instance and the same one.
	a.AddSpans(spans[:2])
	b.AddSpans(spans[2:])
	b.AddProfile(profs[0])
	a.AddProfile(profs[1])
	a.AddProfile(profs[0])
	b.AddProfile(profs[0])
	ctx := context.Background()
	for _, s := range []*Store{a, b} {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats().Store; st.DuplicateBatches != 1 || st.WrittenBatches != 2 {
		t.Errorf("instance b: %d duplicate exports, %d written, want 1 and 2 (spans, one profile)", st.DuplicateBatches, st.WrittenBatches)
	}
	// A third instance that never ingested answers for all.
	c := newStore(t, srv, "same", Options{})
	sameViews(t, mem, c, traceID, spans)
	sameViews(t, mem, a, traceID, spans)
	// Merged parts fold the retried rows for good.
	if _, err := srv.Query("OPTIMIZE TABLE same.spanprof_samples FINAL"); err != nil {
		t.Fatal(err)
	}
	n, err := srv.Query("SELECT count() FROM same.spanprof_samples")
	if err != nil {
		t.Fatal(err)
	}
	want := len(profs[0].Samples) + len(profs[1].Samples)
	if strings.TrimSpace(n) != strings.TrimSpace(jsonOf(t, want)) {
		t.Errorf("after merge %s sample rows, want %d", strings.TrimSpace(n), want)
	}
	sameViews(t, mem, c, traceID, spans)
	if p, err := c.Profile(); err != nil || len(p.Samples) != want {
		t.Errorf("flame graph page profile: %v samples, err %v; want %d", len(p.Samples), err, want)
	}
}

// TestDownThenUp stops ClickHouse under a store: exports are buffered
// (bounded, drops counted), the status says what is wrong, and once the
// server is back the buffer is written without a restart.
func TestDownThenUp(t *testing.T) {
	srv := chtest.Start(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	spans, profs := input(t0)
	s := newStore(t, srv, "down", Options{FlushEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	srv.Down()
	s.AddSpans(spans)
	for _, p := range profs {
		s.AddProfile(p)
	}
	var st live.Stats
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st = s.Stats()
		if st.Store.Status == "failing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %q with the server down", st.Store.Status)
		}
	}
	if st.Store.BufferedBatches != 3 || !strings.Contains(st.Store.Error, "reach clickhouse") {
		t.Errorf("down: %d buffered exports, error %q; want 3 and a connection error", st.Store.BufferedBatches, st.Store.Error)
	}
	if _, _, err := s.TraceView(traceID); err == nil {
		t.Error("trace view with the server down: no error")
	}
	srv.Up()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st = s.Stats()
		if st.Store.Status == "ok" && st.Store.BufferedBatches == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered 30s after the server came back: %+v", *st.Store)
		}
	}
	mem := live.NewStore(live.Limits{})
	mem.AddSpans(spans)
	for _, p := range profs {
		mem.AddProfile(p)
	}
	sameViews(t, mem, s, traceID, spans)
	if st.Store.DroppedSamples != 0 {
		t.Errorf("dropped %d samples with room in the buffer", st.Store.DroppedSamples)
	}
}

// TestBufferBound: with the server down and a small buffer, the oldest
// exports are dropped and counted, and the buffer stays under its bound.
func TestBufferBound(t *testing.T) {
	srv := chtest.Start(t)
	s := newStore(t, srv, "bound", Options{MaxBuffer: 20 << 10})
	srv.Down()
	t0 := time.Now().Add(-time.Hour).UTC()
	var sent uint64
	for i := range 50 {
		_, profs := input(t0.Add(time.Duration(i) * time.Second))
		s.AddProfile(profs[0])
		sent += uint64(len(profs[0].Samples))
		if err := s.Flush(context.Background()); err == nil {
			t.Fatal("flush with the server down: no error")
		}
	}
	if err := s.Admit(); err == nil || !strings.Contains(err.Error(), "retry later") {
		t.Errorf("admit with a full buffer: %v, want a refusal", err)
	}
	st := s.Stats().Store
	if st.RefusedBusy != 1 {
		t.Errorf("refused %d exports, want 1", st.RefusedBusy)
	}
	if st.BufferedBytes > st.MaxBufferBytes || st.DroppedSamples == 0 || st.DroppedBatches == 0 {
		t.Errorf("buffer %d of %d bytes, dropped %d samples in %d exports", st.BufferedBytes, st.MaxBufferBytes, st.DroppedSamples, st.DroppedBatches)
	}
	srv.Up()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(); err != nil {
		t.Errorf("admit after the buffer was written: %v", err)
	}
	st = s.Stats().Store
	if st.WrittenSamples+st.DroppedSamples != sent {
		t.Errorf("written %d + dropped %d samples, sent %d", st.WrittenSamples, st.DroppedSamples, sent)
	}
}

// TestRetention drops day partitions past the retention and keeps the
// rest.
func TestRetention(t *testing.T) {
	srv := chtest.Start(t)
	s := newStore(t, srv, "ret", Options{RetentionDays: 2})
	now := time.Now().UTC()
	for _, age := range []int{0, 1, 2, 5} {
		spans, profs := input(now.AddDate(0, 0, -age))
		s.AddSpans(spans)
		s.AddProfile(profs[0])
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.dropExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := srv.Query("SELECT count(DISTINCT toDate(toDateTime(intDiv(TimeUnixNano, 1000000000)))) FROM ret.spanprof_samples")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "2" {
		t.Errorf("%s days of samples left, want 2", strings.TrimSpace(out))
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ in, base, db, err string }{
		{"clickhouse://127.0.0.1:8123/prof", "http://127.0.0.1:8123/", "prof", ""},
		{"clickhouse://ch", "http://ch:8123/", "spanprof", ""},
		{"clickhouse://u:p@ch:9/x", "http://ch:9/", "x", ""},
		{"http://ch/x", "", "", "want clickhouse://"},
		{"clickhouse://ch/x;drop", "", "", "database name"},
	} {
		tg, err := ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || tg.Base != c.base || tg.Database != c.db {
			t.Errorf("%s: %+v %v", c.in, tg, err)
		}
	}
}
