package agent

import (
	"bytes"
	"log/slog"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// reportRecords are on- and off-CPU records of this process over a few
// stacks, each with its own time, thread, value, state and span link.
func reportRecords(t0 time.Time) []*sampler.Record {
	self := uint32(os.Getpid())
	var rs []*sampler.Record
	for i := range 300 {
		r := testRecord(self, t0.Add(time.Duration(i)*time.Millisecond+time.Duration(i)))
		r.TID = self + uint32(i%7)
		r.Comm = []string{"main", "worker"}[i%2]
		r.UserStack = []uint64{userPC() + 1 + uint64(i%3)}
		if i%3 == 0 {
			r.Kind, r.Value, r.State = sampler.OffCPU, int64(2e6+i), "SD"[i%2]
			r.KernStack = []uint64{0xffffffff81000100, 0xffffffff81000200 + uint64(i%2)}
		}
		if i%4 == 0 {
			r.Link = sampler.Link{TraceID: [16]byte{1, byte(i)}, SpanID: [8]byte{2, byte(i)}}
		}
		rs = append(rs, r)
	}
	return rs
}

// TestReportSendsWhatTheProfileHolds checks that the report, which streams
// the collector's samples into the aggregate it encodes, sends the same
// events (times, threads, values, states, reasons, links, frames) and
// resources as the encoding of the whole profile Build returns, the
// goroutine-wait records, of another process with their own wait reason,
// included.
func TestReportSendsWhatTheProfileHolds(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	tracker := proc.NewTracker("/proc", nil)
	defer tracker.Close()
	end := time.Unix(1700000010, 0)
	goWait := []sampler.Record{
		{Kind: sampler.OffCPU, PID: 0x7ffffff1, Comm: "goroutine", Value: 5e6, Time: time.Unix(1700000005, 0), State: 'S',
			UserStack: []uint64{0x401000, 0x402000}, Reason: "chan receive"},
	}
	cfg := testConfig(col.addr)
	cfg.MetricsListen = ""
	a, err := New(cfg, testPipeline(t, cfg, newFakeSource(), pipeline.Parts{Tracker: tracker, Kernel: noKernel{}}, nil),
		Options{Now: func() time.Time { return end }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.closeExporters()

	rs := reportRecords(time.Unix(1700000000, 0))
	ref := collect.New(collect.Options{Frequency: cfg.Frequency, Tracker: tracker, Kernel: noKernel{}})
	for _, r := range rs {
		a.p.Handle(sampler.Event{Sample: r})
		ref.Add(r)
	}
	a.p.HandleBatch(goWait)
	for i := range goWait {
		ref.Add(&goWait[i])
	}
	a.report(false)
	got := col.waitReceived(t, 1, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("%d batches sent, want 1", len(got))
	}
	gotProf, err := otlp.FromProfiles(got[0])
	if err != nil {
		t.Fatal(err)
	}

	want := ref.Build(end)
	a.stampHost(want)
	b, err := NewBatch(want)
	if err != nil {
		t.Fatal(err)
	}
	wantProf, err := otlp.ReadProto(bytes.NewReader(b.data))
	if err != nil {
		t.Fatal(err)
	}
	if len(gotProf.Samples) != len(rs)+len(goWait) {
		t.Errorf("sent %d events, want %d", len(gotProf.Samples), len(rs)+len(goWait))
	}
	reasons := 0
	for _, s := range gotProf.Samples {
		if s.PID == goWait[0].PID && s.Reason == goWait[0].Reason {
			reasons++
		}
	}
	if reasons != len(goWait) {
		t.Errorf("%d events of the goroutine-wait process keep its wait reason, want %d", reasons, len(goWait))
	}
	// Start differs: each collector started at its own New.
	if !reflect.DeepEqual(gotProf.Processes, wantProf.Processes) {
		t.Errorf("resources %v, want %v", gotProf.Processes, wantProf.Processes)
	}
	for i := range min(len(gotProf.Samples), len(wantProf.Samples)) {
		if !reflect.DeepEqual(gotProf.Samples[i], wantProf.Samples[i]) {
			t.Fatalf("event %d differs:\n got %+v\nwant %+v", i, gotProf.Samples[i], wantProf.Samples[i])
		}
	}
	for i, r := range rs { // FromProfiles orders events by time, as the records are
		s := gotProf.Samples[i]
		if !s.Time.Equal(r.Time) || s.TID != r.TID || s.Value != r.Value || s.Link != profile.Link(r.Link) || s.Kind != wantKind[r.Kind] {
			t.Fatalf("event %d: %+v, from record %+v", i, s, r)
		}
	}
}

// wantKind is the profile's kind of each sampler kind.
var wantKind = map[sampler.Kind]profile.Kind{sampler.OnCPU: profile.OnCPU, sampler.OffCPU: profile.OffCPU}
