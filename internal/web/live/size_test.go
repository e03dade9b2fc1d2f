package live

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
)

// decodedBatch returns a profile as the receiver holds it: built, sent
// through the OTLP wire format and decoded, so stacks and strings are
// shared as the decoder shares them.
func decodedBatch(t testing.TB, rng *rand.Rand, pid uint32) *profile.Profile {
	t.Helper()
	p := &profile.Profile{Frequency: 19, Processes: map[uint32]*profile.Process{pid: {PID: pid, ExeName: "svc", ServiceName: "svc"}}}
	var stacks [][]profile.Frame
	for range 32 {
		st := make([]profile.Frame, 8+rng.IntN(17))
		for i := range st {
			f := rng.IntN(2000)
			st[i] = profile.Frame{Function: fmt.Sprintf("pkg%d.(*Type%d).Method%d", f%40, f%200, f), Address: 0x400000 + uint64(f)*64}
		}
		stacks = append(stacks, st)
	}
	for i := range 240 {
		s := profile.Sample{Kind: profile.OnCPU, PID: pid, TID: pid + uint32(i%4), Value: 1, Frames: stacks[rng.IntN(len(stacks))]}
		if i%5 == 0 {
			s.Link = profile.Link{TraceID: [16]byte{byte(i), 1}, SpanID: [8]byte{byte(i)}}
		}
		if i%4 == 0 {
			s.Kind, s.Value, s.State, s.Reason = profile.OffCPU, 1000, "S", "futex_wait_queue"
		}
		p.Samples = append(p.Samples, s)
	}
	wire, err := pprofileotlp.NewExportRequestFromProfiles(otlp.Build(p)).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(wire); err != nil {
		t.Fatal(err)
	}
	out, err := otlp.FromProfiles(req.Profiles())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestBatchBytesTracksHeap holds decoded batches in a store and compares
// the store's byte estimate with the heap they really keep alive, as the
// runtime measures it: --window-bytes is only a bound if the estimate is.
func TestBatchBytesTracksHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := NewStore(Limits{MaxBytes: 1 << 40, MaxSamples: 1 << 30})
	before := heapInUse()
	for i := range 400 {
		s.AddProfile(decodedBatch(t, rng, uint32(1000+i)))
	}
	grown := int64(heapInUse() - before)
	est := s.Stats().Bytes
	ratio := float64(est) / float64(grown)
	t.Logf("400 batches, %d samples: estimate %.1f MiB, heap grew %.1f MiB (%.2f)", s.Stats().Samples, float64(est)/(1<<20), float64(grown)/(1<<20), ratio)
	if ratio < 0.8 || ratio > 1.25 {
		t.Errorf("estimate %d bytes is %.2f× the heap the window holds (%d): want within 0.8-1.25", est, ratio, grown)
	}
	runtime.KeepAlive(s)
}

// TestEvictionByBytes fills a window past its byte budget: the oldest
// batches go, are counted as byte evictions, and the window stays under
// the budget.
func TestEvictionByBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	one := decodedBatch(t, rng, 1)
	per := batchBytes(&batch{p: one, byTrace: map[[16]byte][]int32{}})
	s := NewStore(Limits{MaxBytes: 10 * per, MaxSamples: 1 << 30})
	for i := range 30 {
		s.AddProfile(decodedBatch(t, rng, uint32(i)))
	}
	st := s.Stats()
	if st.Bytes > st.MaxBytes || st.Batches < 8 || st.Batches > 11 {
		t.Errorf("window of %d batches, %d bytes over a budget of %d (one batch ≈ %d)", st.Batches, st.Bytes, st.MaxBytes, per)
	}
	if want := st.ReceivedSamples - uint64(st.Samples); st.EvictedSamplesBytes != want || st.EvictedSamplesSize != 0 || st.EvictedSamplesAge != 0 {
		t.Errorf("evicted by bytes %d, by count %d, by age %d; want %d by bytes", st.EvictedSamplesBytes, st.EvictedSamplesSize, st.EvictedSamplesAge, want)
	}
}
