package profile_test

import (
	"testing"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// BenchmarkNewAggregate measures grouping 100k samples (10% off-CPU, 256
// stacks of depth 8-32, 64 spans); see ns/sample.
func BenchmarkNewAggregate(b *testing.B) {
	p := exporttest.Synthetic(100_000)
	b.ReportAllocs()
	for b.Loop() {
		profile.NewAggregate(p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Samples)), "ns/sample")
}
