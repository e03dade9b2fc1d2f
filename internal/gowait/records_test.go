package gowait

import (
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// take returns the records s delivered so far, in order.
func take(s *Sampler) []sampler.Record {
	var out []sampler.Record
	for {
		select {
		case b := <-s.Records():
			out = append(out, b...)
		default:
			return out
		}
	}
}

// consume hands s's batches, as they come, to a collector with a tracker
// and s's symbolizer, as the pipeline's consumer does: the process is read
// at its first record, while it lives. The function it returns stops and
// returns the profile's samples.
func consume(s *Sampler) func() []profile.Sample {
	stop, done := make(chan struct{}), make(chan []profile.Sample)
	go func() {
		tracker := proc.NewTracker("/proc", nil)
		defer tracker.Close()
		c := collect.New(collect.Options{Tracker: tracker, Symbolizer: s.opts.Symbolizer})
		add := func(b []sampler.Record) {
			for i := range b {
				c.Add(&b[i])
			}
		}
		for {
			select {
			case b := <-s.Records():
				add(b)
			case <-stop:
				add(take(s))
				done <- c.Build(time.Now()).Samples
				return
			}
		}
	}()
	return func() []profile.Sample { close(stop); return <-done }
}

// symbolized hands records to a collector with a tracker and s's
// symbolizer, as the pipeline's consumer does, and returns the profile's
// samples.
func symbolized(t testing.TB, s *Sampler, recs []sampler.Record) []profile.Sample {
	t.Helper()
	tracker := proc.NewTracker("/proc", nil)
	defer tracker.Close()
	c := collect.New(collect.Options{Tracker: tracker, Symbolizer: s.opts.Symbolizer})
	for i := range recs {
		c.Add(&recs[i])
	}
	return c.Build(time.Now()).Samples
}
