package otlp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// eventString renders one sample with everything the readers must keep,
// resolving mappings the way exporters do, so a round trip compares
// meaning rather than pointers.
func eventString(s profile.Sample) string {
	var fr []string
	for _, f := range s.Frames {
		m, _ := profile.ExportMapping(f)
		fr = append(fr, fmt.Sprintf("%s@%#x:%s:%d:%v[%s %s %s %#x]", f.Function, f.Address, f.File, f.Line, f.Inlined,
			m.Path, m.BuildID, m.HTLHash, m.Start))
	}
	return fmt.Sprintf("%v pid=%d tid=%d %q link=%s/%s t=%d v=%d %s/%s %s", s.Kind, s.PID, s.TID, s.ThreadName,
		s.Link.TraceIDHex(), s.Link.SpanIDHex(), s.Time.UnixNano(), s.Value, s.State, s.Reason, strings.Join(fr, ";"))
}

func TestReadRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		write func(io.Writer, *profile.Profile) error
		read  func(io.Reader) (*profile.Profile, error)
	}{
		{"json", WriteJSON, ReadJSON},
		{"proto", WriteProto, ReadProto},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := exporttest.Small()
			var buf bytes.Buffer
			if err := tt.write(&buf, want); err != nil {
				t.Fatal(err)
			}
			got, err := tt.read(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Samples) != len(want.Samples) {
				t.Fatalf("read %d samples, want %d", len(got.Samples), len(want.Samples))
			}
			for i := range want.Samples {
				if g, w := eventString(got.Samples[i]), eventString(want.Samples[i]); g != w {
					t.Errorf("sample %d:\n got %s\nwant %s", i, g, w)
				}
			}
			if got.Frequency != want.Frequency || !got.Start.Equal(want.Start) || !got.End.Equal(want.End) {
				t.Errorf("frequency/start/end = %d %v %v, want %d %v %v", got.Frequency, got.Start, got.End,
					want.Frequency, want.Start, want.End)
			}
			srv := got.Processes[100]
			if srv == nil || srv.ExeName != "server" || srv.ServiceName != "checkout" || srv.ContainerID != "c0ffee" ||
				srv.Attributes["deployment.environment.name"] != "prod" {
				t.Errorf("process 100 = %+v", srv)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		name    string
		read    func(io.Reader) (*profile.Profile, error)
		in      string
		wantErr error
		wantMsg string
	}{
		{"json garbage", ReadJSON, "not json", nil, "decode otlp json"},
		{"json empty object", ReadJSON, "{}", ErrNoProfiles, "no profiles"},
		{"proto garbage", ReadProto, "\xff\xff\xff", nil, "decode otlp protobuf"},
		{"bad stack index", ReadJSON, `{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"samples":[{"stackIndex":7}]}]}]}]}`,
			nil, "stack index 7 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.read(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line containing %q", err, tt.wantMsg)
			}
		})
	}
}

// TestSortByTime checks sortByTime against slices.SortStableFunc, ties
// and zero times included: the same order, sample for sample.
func TestSortByTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).UTC()
	rnd := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name  string
		n     int
		times func(i int) time.Time
	}{
		{"empty", 0, nil},
		{"sorted", 50, func(i int) time.Time { return t0.Add(time.Duration(i)) }},
		{"reversed", 50, func(i int) time.Time { return t0.Add(-time.Duration(i) * time.Second) }},
		{"ties and zero times", 500, func(i int) time.Time {
			if rnd.IntN(10) == 0 {
				return time.Time{}
			}
			return t0.Add(time.Duration(rnd.IntN(20)) * time.Millisecond)
		}},
		{"random", 2000, func(i int) time.Time { return t0.Add(time.Duration(rnd.Int64N(1e12))) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []profile.Sample
			for i := range tt.n {
				got = append(got, profile.Sample{TID: uint32(i), Time: tt.times(i)})
			}
			want := slices.Clone(got)
			slices.SortStableFunc(want, func(a, b profile.Sample) int { return a.Time.Compare(b.Time) })
			sortByTime(got)
			for i := range want {
				if got[i].TID != want[i].TID || !got[i].Time.Equal(want[i].Time) {
					t.Fatalf("position %d: sample %d at %v, want %d at %v", i, got[i].TID, got[i].Time, want[i].TID, want[i].Time)
				}
			}
		})
	}
}
