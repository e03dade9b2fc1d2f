package chstore

import (
	"os"
	"syscall"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/export/otlp"
)

// BenchmarkIngest measures what serve --store does with one agent export
// of 2,000 samples before the insert: protobuf decoding (pdata), the
// profile model (otlp.FromProfiles) and the RowBinary rows
// (encodeProfile), with the stacks already written, as in steady state.
// bench/servestore measures the whole of serve and ClickHouse.
//
// SPANPROF_INGEST_INPUT=FILE.otlp.pb takes a recorded export instead
// (`spanprof record --all --off-cpu --output FILE.otlp.pb`): real stacks,
// deeper and with longer names than the synthetic ones.
func BenchmarkIngest(b *testing.B) {
	var pm pprofile.ProtoMarshaler
	buf, err := pm.MarshalProfiles(otlp.Build(exporttest.Synthetic(2000)))
	if err != nil {
		b.Fatal(err)
	}
	if in := os.Getenv("SPANPROF_INGEST_INPUT"); in != "" {
		if buf, err = os.ReadFile(in); err != nil {
			b.Fatal(err)
		}
	}
	seen := map[stackDay]bool{}
	isSeen := func(h uint64, d uint16) bool {
		k := stackDay{h, d}
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	}
	var pu pprofile.ProtoUnmarshaler
	n := 0
	b.ReportAllocs()
	// The process's CPU time (GC included) is the steadier figure on a
	// shared machine, where wall time per op swings with the load.
	cpu0 := cpuTime()
	for b.Loop() {
		pd, err := pu.UnmarshalProfiles(buf)
		if err != nil {
			b.Fatal(err)
		}
		p, err := otlp.FromProfiles(pd)
		if err != nil {
			b.Fatal(err)
		}
		n = encodeProfile(p, isSeen).n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/sample")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(n), "cpu-ns/sample")
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
