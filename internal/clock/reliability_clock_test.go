package clock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClocks is a Source whose realtime clock the test steps, as
// settimeofday or an NTP step would, without touching the machine's.
type fakeClocks struct {
	mono atomic.Int64 // advances 100ns per read, like a running clock
	step atomic.Int64 // realtime − monotonic
}

func (f *fakeClocks) source() Source {
	return Source{
		Realtime:  func() int64 { return f.mono.Add(100) + f.step.Load() },
		Monotonic: func() int64 { return f.mono.Add(100) },
	}
}

func TestReliabilityConverterFollowsRealtimeStep(t *testing.T) {
	f := &fakeClocks{}
	f.mono.Store(int64(time.Hour))
	f.step.Store(1_700_000_000 * int64(time.Second))
	c := NewConverterFrom(f.source())
	before := c.Offset()
	if before.Nanos != f.step.Load() {
		t.Fatalf("offset %d, want %d", before.Nanos, f.step.Load())
	}
	base := f.mono.Load()

	// Step the realtime clock forward by 10 s.
	const step = 10 * time.Second
	f.step.Add(int64(step))

	// A timestamp within ResyncInterval of the last measurement keeps the
	// old offset (no measurement per sample)...
	syncs := c.Syncs()
	if got := c.UnixNano(KTime(base + int64(ResyncInterval/2))); got != base+int64(ResyncInterval/2)+before.Nanos {
		t.Fatalf("converted with a new offset before the resync interval")
	}
	if c.Syncs() != syncs {
		t.Fatalf("measured again within the resync interval")
	}
	// ...and the first one past it re-measures, so the step reaches the
	// samples without anyone calling Run or Sync.
	kt := KTime(base + int64(ResyncInterval) + 1)
	got := c.UnixNano(kt)
	want := int64(kt) + before.Nanos + int64(step)
	if got != want {
		t.Fatalf("after a %v step: converted %d, want %d (off by %v)", step, got, want, time.Duration(got-want))
	}
	if c.Syncs() != syncs+1 {
		t.Fatalf("syncs %d, want %d", c.Syncs(), syncs+1)
	}

	// Stepping back restores the old offset on the next resync.
	f.step.Add(-int64(step))
	kt = KTime(f.mono.Load() + int64(ResyncInterval) + 1)
	if got := c.UnixNano(kt); got != int64(kt)+before.Nanos {
		t.Fatalf("after stepping back: off by %v", time.Duration(got-int64(kt)-before.Nanos))
	}
}

func TestReliabilityMeasureSkipsSteppedBrackets(t *testing.T) {
	// A step inside a bracket (r2 < r1) must not become the offset.
	var mono int64 = 1000
	var calls int
	src := Source{
		Monotonic: func() int64 { mono += 10; return mono },
		Realtime: func() int64 {
			calls++
			mono += 10
			if calls == 2 { // the first bracket's second read: stepped back 1 s
				return mono - int64(time.Second)
			}
			return mono + 5000
		},
	}
	o := src.Measure(4)
	if o.Nanos < 4000 || o.Nanos > 6000 {
		t.Fatalf("offset %d from a stepped bracket, want ~5000", o.Nanos)
	}
}

func TestReliabilityZeroConverterSyncsOnFirstUse(t *testing.T) {
	var c Converter // a zero Converter must not convert with offset 0
	now := time.Now()
	got := c.Time(KTime(System.Monotonic()))
	if d := got.Sub(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("zero converter gave %v, now is %v", got, now)
	}
}

func TestReliabilityConcurrentConversions(t *testing.T) {
	f := &fakeClocks{}
	f.step.Store(int64(time.Hour))
	c := NewConverterFrom(f.source())
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000; i++ {
				kt := KTime(f.mono.Add(1000))
				if got := c.UnixNano(kt); got-int64(kt) != int64(time.Hour) {
					t.Errorf("offset %d", got-int64(kt))
					return
				}
			}
		}()
	}
	wg.Wait()
	// 8×10000 reads of 1µs each advance the clock ~0.08 s of fake time
	// plus the sources' own reads: a handful of syncs, not one per call.
	if n := c.Syncs(); n > 10 {
		t.Fatalf("%d syncs for ~0.1 s of timestamps", n)
	}
}
