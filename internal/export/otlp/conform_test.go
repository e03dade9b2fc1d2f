package otlp

import (
	"bytes"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/export/otlp/conform"
	"github.com/spanprof/spanprof/internal/profile"
)

// late is Small with samples outside its window, as a recording has them:
// off-CPU and on-CPU events read after the window closed, and one stamped
// before it opened.
func late() *profile.Profile {
	p := exporttest.Small()
	n := len(p.Samples)
	for i := range n {
		s := p.Samples[i]
		s.Time = p.End.Add(time.Duration(i+1) * 50 * time.Millisecond)
		p.Samples = append(p.Samples, s)
	}
	early := p.Samples[0]
	early.Time = p.Start.Add(-time.Millisecond)
	p.Samples = append(p.Samples, early)
	return p
}

// noLines is Small with every line -1, as Go's line table gives for
// functions without one.
func noLines() *profile.Profile {
	p := exporttest.Small()
	for i := range p.Samples {
		fs := append([]profile.Frame(nil), p.Samples[i].Frames...)
		for j := range fs {
			fs[j].Line = -1
		}
		p.Samples[i].Frames = fs
	}
	return p
}

// TestOutputsConform runs the conformance rules over both file formats,
// on-CPU and off-CPU profiles, with samples inside and outside the
// collection window. The protobuf form must also be clean as profcheck
// counts references.
func TestOutputsConform(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    func() *profile.Profile
	}{{"in window", exporttest.Small}, {"outside window", late}, {"unknown lines", noLines}} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := map[profile.Kind]bool{}
			for _, s := range tc.p().Samples {
				kinds[s.Kind] = true
			}
			if !kinds[profile.OnCPU] || !kinds[profile.OffCPU] {
				t.Fatalf("fixture lacks on- or off-CPU samples: %v", kinds)
			}
			var pb, js bytes.Buffer
			if err := WriteProto(&pb, tc.p()); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, tc.p()); err != nil {
				t.Fatal(err)
			}
			if err := (conform.Checker{}).CheckProto(pb.Bytes()); err != nil {
				t.Errorf(".otlp.pb: %v", err)
			}
			if err := (conform.Checker{Profcheck: true}).CheckProto(pb.Bytes()); err != nil {
				t.Errorf(".otlp.pb, as profcheck counts: %v", err)
			}
			if err := (conform.Checker{}).CheckJSON(js.Bytes()); err != nil {
				t.Errorf(".otlp.json: %v", err)
			}
		})
	}
}

// TestTimeRangeCoversWindowAndSamples: the profile keeps its collection
// window and widens it only as far as its samples need.
func TestTimeRangeCoversWindowAndSamples(t *testing.T) {
	p := late()
	var lo, hi time.Time
	for _, s := range p.Samples {
		if s.Kind != profile.OffCPU {
			continue
		}
		if lo.IsZero() || s.Time.Before(lo) {
			lo = s.Time
		}
		if s.Time.After(hi) {
			hi = s.Time
		}
	}
	pd := Build(p)
	var off pprofile.Profile
	found := false
	for _, rp := range pd.ResourceProfiles().All() {
		for _, pr := range rp.ScopeProfiles().At(0).Profiles().All() {
			if pd.Dictionary().StringTable().At(int(pr.SampleType().TypeStrindex())) == sampleTypeOffCPU {
				off, found = pr, true
			}
		}
	}
	if !found {
		t.Fatal("no off-CPU profile")
	}
	start := off.Time().AsTime()
	end := start.Add(time.Duration(off.DurationNano()))
	if !start.Equal(p.Start) {
		t.Errorf("start %v, want the window's %v (no off-CPU sample before it)", start, p.Start)
	}
	if want := hi.Add(time.Nanosecond); !end.Equal(want) {
		t.Errorf("end %v, want just after the last off-CPU sample %v", end, want)
	}
	if lo.Before(p.Start) {
		t.Fatalf("fixture: off-CPU sample before the window")
	}
}
