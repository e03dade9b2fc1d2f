package otlp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// flatSample is an OTLP sample resolved through the dictionary, so tests
// compare meaning rather than table indices.
type flatSample struct {
	pid    int64
	typ    string
	stack  string
	link   string
	attrs  string
	times  []int // milliseconds after exporttest.T0
	values []int64
}

func str(d pprofile.ProfilesDictionary, i int32) string { return d.StringTable().At(int(i)) }

func attrString(t *testing.T, d pprofile.ProfilesDictionary, idx pcommon.Int32Slice) string {
	t.Helper()
	var parts []string
	for _, i := range idx.All() {
		kv := d.AttributeTable().At(int(i))
		parts = append(parts, str(d, kv.KeyStrindex())+"="+kv.Value().AsString())
	}
	return strings.Join(parts, ",")
}

func stackString(d pprofile.ProfilesDictionary, stackIdx int32) string {
	var locs []string
	for _, li := range d.StackTable().At(int(stackIdx)).LocationIndices().All() {
		loc := d.LocationTable().At(int(li))
		var fns []string
		for _, ln := range loc.Lines().All() {
			fns = append(fns, str(d, d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex()))
		}
		if len(fns) > 0 {
			locs = append(locs, strings.Join(fns, "|"))
			continue
		}
		m := d.MappingTable().At(int(loc.MappingIndex()))
		locs = append(locs, fmt.Sprintf("%s@%#x", str(d, m.FilenameStrindex()), loc.Address()))
	}
	return strings.Join(locs, ";")
}

func flatten(t *testing.T, pd pprofile.Profiles) []flatSample {
	t.Helper()
	d := pd.Dictionary()
	var out []flatSample
	for _, rp := range pd.ResourceProfiles().All() {
		pidV, _ := rp.Resource().Attributes().Get(AttrProcessPID)
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				typ := str(d, prof.SampleType().TypeStrindex()) + "/" + str(d, prof.SampleType().UnitStrindex())
				for _, s := range prof.Samples().All() {
					fs := flatSample{pid: pidV.Int(), typ: typ, stack: stackString(d, s.StackIndex()),
						attrs: attrString(t, d, s.AttributeIndices()), values: s.Values().AsRaw()}
					if li := s.LinkIndex(); li != 0 {
						l := d.LinkTable().At(int(li))
						tid, sid := l.TraceID(), l.SpanID()
						fs.link = hex.EncodeToString(tid[:]) + "/" + hex.EncodeToString(sid[:])
					}
					for _, ts := range s.TimestampsUnixNano().All() {
						fs.times = append(fs.times, int(time.Duration(int64(ts)-exporttest.T0.UnixNano())/time.Millisecond))
					}
					out = append(out, fs)
				}
			}
		}
	}
	return out
}

func linkStr(l profile.Link) string { return l.TraceIDHex() + "/" + l.SpanIDHex() }

func TestRoundTrip(t *testing.T) {
	kernelStack := "do_syscall_64;main.handle;main.main"
	offStack := "schedule;pthread_cond_wait;main.handle;main.main"
	want := []flatSample{
		{100, "samples/count", kernelStack, linkStr(exporttest.LinkA), "thread.id=101,thread.name=server", []int{1, 2}, []int64{1, 1}},
		{100, "samples/count", kernelStack, linkStr(exporttest.LinkB), "thread.id=101,thread.name=server", []int{3}, []int64{1}},
		{100, "samples/count", kernelStack, "", "thread.id=101,thread.name=server", []int{4}, []int64{1}},
		{100, "samples/count", "/opt/lib/libnoid.so@0x7f2000000234;main.main", linkStr(exporttest.LinkA), "thread.id=102,thread.name=server-w", []int{5}, []int64{1}},
		{100, "off_cpu/nanoseconds", offStack, linkStr(exporttest.LinkA), "thread.id=101,thread.name=server,thread.state=S,off_cpu.reason=futex_wait_queue", []int{8, 9}, []int64{5_000_000, 3_000_000}},
		{100, "off_cpu/nanoseconds", offStack, linkStr(exporttest.LinkA), "thread.id=101,thread.name=server,thread.state=D,off_cpu.reason=io_schedule", []int{10}, []int64{2_000_000}},
		{200, "samples/count", "main.helper|main.outer;main.main", "", "thread.id=200,thread.name=worker", []int{6}, []int64{1}},
		{200, "samples/count", "@0x1234;main.main", "", "thread.id=200,thread.name=worker", []int{7}, []int64{1}},
	}
	tests := []struct {
		name   string
		encode func(*bytes.Buffer, *profile.Profile) error
		decode func([]byte) (pprofile.Profiles, error)
	}{
		{"json", func(b *bytes.Buffer, p *profile.Profile) error { return WriteJSON(b, p) },
			(&pprofile.JSONUnmarshaler{DisallowUnknownFields: true}).UnmarshalProfiles},
		{"proto", func(b *bytes.Buffer, p *profile.Profile) error { return WriteProto(b, p) },
			(&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.encode(&buf, exporttest.Small()); err != nil {
				t.Fatal(err)
			}
			pd, err := tt.decode(buf.Bytes())
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got := flatten(t, pd)
			if len(got) != len(want) {
				t.Fatalf("got %d samples, want %d: %+v", len(got), len(want), got)
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("sample %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
			checkResources(t, pd)
			checkProfiles(t, pd)
			checkMappings(t, pd.Dictionary())
		})
	}
}

func checkResources(t *testing.T, pd pprofile.Profiles) {
	t.Helper()
	want := []map[string]any{
		{"process.pid": int64(100), "process.executable.name": "server", "process.executable.path": "/usr/bin/server",
			"service.name": "checkout", "container.id": "c0ffee", "deployment.environment.name": "prod"},
		{"process.pid": int64(200), "process.executable.name": "worker", "process.executable.path": "/usr/bin/worker"},
	}
	if n := pd.ResourceProfiles().Len(); n != len(want) {
		t.Fatalf("got %d resources, want %d", n, len(want))
	}
	for i, w := range want {
		if got := pd.ResourceProfiles().At(i).Resource().Attributes().AsRaw(); !reflect.DeepEqual(got, w) {
			t.Errorf("resource %d: got %v, want %v", i, got, w)
		}
	}
}

func checkProfiles(t *testing.T, pd pprofile.Profiles) {
	t.Helper()
	d := pd.Dictionary()
	// Process 100 has on- and off-CPU profiles; process 200 only on-CPU.
	wantCounts := []int{2, 1}
	for i, rp := range pd.ResourceProfiles().All() {
		profs := rp.ScopeProfiles().At(0).Profiles()
		if profs.Len() != wantCounts[i] {
			t.Errorf("resource %d: got %d profiles, want %d", i, profs.Len(), wantCounts[i])
		}
		for _, prof := range profs.All() {
			if got := prof.Time().AsTime(); !got.Equal(exporttest.T0) {
				t.Errorf("profile time %v, want %v", got, exporttest.T0)
			}
			if prof.DurationNano() != uint64(2*time.Second) {
				t.Errorf("profile duration %d, want 2s", prof.DurationNano())
			}
			if prof.ProfileID().IsEmpty() {
				t.Error("profile id is empty")
			}
			if str(d, prof.SampleType().TypeStrindex()) != "samples" {
				continue
			}
			pt := str(d, prof.PeriodType().TypeStrindex()) + "/" + str(d, prof.PeriodType().UnitStrindex())
			if pt != "cpu/nanoseconds" || prof.Period() != 10_000_000 {
				t.Errorf("period %s %d, want cpu/nanoseconds 10000000", pt, prof.Period())
			}
		}
	}
	if d.StringTable().At(0) != "" || d.LinkTable().At(0).TraceID() != (pcommon.TraceID{}) ||
		d.StackTable().At(0).LocationIndices().Len() != 0 || d.MappingTable().At(0).FilenameStrindex() != 0 {
		t.Error("dictionary tables must start with a zero entry")
	}
}

func checkMappings(t *testing.T, d pprofile.ProfilesDictionary) {
	t.Helper()
	got := map[string]string{}
	for i, m := range d.MappingTable().All() {
		if i == 0 {
			continue
		}
		got[str(d, m.FilenameStrindex())] = attrString(t, d, m.AttributeIndices())
	}
	want := map[string]string{
		"/usr/bin/server":                 AttrBuildIDGNU + "=" + exporttest.ServerBuildID,
		"/lib/x86_64-linux-gnu/libc.so.6": AttrBuildIDGNU + "=" + exporttest.LibcBuildID,
		"/opt/lib/libnoid.so":             AttrBuildIDHTLHash + "=" + exporttest.NoIDHash,
		profile.KernelMappingPath:         "",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mappings:\n got %v\nwant %v", got, want)
	}
}

// TestSpansNeverMerged builds many events that differ only by span and
// checks each span keeps its own sample.
func TestSpansNeverMerged(t *testing.T) {
	p := exporttest.Small()
	base := p.Samples[0]
	p.Samples = nil
	for i := range 50 {
		s := base
		s.Link.SpanID[7] = byte(i)
		p.Samples = append(p.Samples, s, s)
	}
	samples := Build(p).ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	if samples.Len() != 50 {
		t.Fatalf("got %d samples, want 50", samples.Len())
	}
	seen := map[int32]bool{}
	for _, s := range samples.All() {
		if s.Values().Len() != 2 || s.TimestampsUnixNano().Len() != 2 {
			t.Errorf("sample has %d values, %d timestamps; want 2 and 2", s.Values().Len(), s.TimestampsUnixNano().Len())
		}
		if seen[s.LinkIndex()] || s.LinkIndex() == 0 {
			t.Errorf("link index %d reused or empty", s.LinkIndex())
		}
		seen[s.LinkIndex()] = true
	}
}

// TestContextAttrsExported: the thread context's attributes are sample
// attributes under their keys, keep samples apart, and read back.
func TestContextAttrsExported(t *testing.T) {
	p := exporttest.Small()
	base := p.Samples[0]
	p.Samples = nil
	for _, m := range []string{"GET", "POST", "GET"} {
		s := base
		s.Attrs = profile.MakeAttrs([]profile.Attr{{Key: "http.request.method", Value: m}, {Key: "http.route", Value: "/a"}})
		p.Samples = append(p.Samples, s)
	}
	pd := Build(p)
	samples := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	if samples.Len() != 2 {
		t.Fatalf("got %d samples, want 2 (GET twice, POST)", samples.Len())
	}
	back, err := FromProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range back.Samples {
		got = append(got, fmt.Sprint(s.Attrs.All()))
	}
	want := []string{"[{http.request.method GET} {http.route /a}]", "[{http.request.method GET} {http.route /a}]", "[{http.request.method POST} {http.route /a}]"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("read back %q, want %q", got, want)
	}
}
