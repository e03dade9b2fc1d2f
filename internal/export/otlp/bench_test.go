package otlp

import (
	"io"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// BenchmarkEncode measures turning 100k samples into OTLP: aggregation plus
// pdata building ("build"), and the whole file path ("proto", "json").
func BenchmarkEncode(b *testing.B) {
	p := exporttest.Synthetic(100_000)
	var pm pprofile.ProtoMarshaler
	tests := []struct {
		name string
		run  func() error
	}{
		{"build", func() error { Build(p); return nil }},
		{"proto", func() error { _, err := pm.MarshalProfiles(Build(p)); return err }},
		{"json", func() error { return WriteJSON(io.Discard, p) }},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tt.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
		})
	}
	b.Run("from-aggregate", func(b *testing.B) {
		agg := profile.NewAggregate(p)
		for b.Loop() {
			BuildAggregate(p, agg)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
	})
	buf, err := pm.MarshalProfiles(Build(p))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d samples: %d bytes protobuf (%.1f bytes/sample)", len(p.Samples), len(buf), float64(len(buf))/float64(len(p.Samples)))
}
