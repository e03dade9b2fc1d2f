// Package pipelinetest holds a fake pipeline.Source, so that the stages
// after the sampler are tested without loading programs into the kernel.
package pipelinetest

import (
	"sync/atomic"

	"github.com/spanprof/spanprof/internal/sampler"
)

// Source stands in for the eBPF sampler: a test writes events to Ch
// (Sample and Proc for one of each), and Stop closes the channel as the
// sampler does once its ring is drained.
type Source struct {
	Ch     chan sampler.Event
	Counts map[string]uint64
	// Stopped is set by Stop.
	Stopped atomic.Bool
}

// NewSource returns a source whose channel queues n events.
func NewSource(n int) *Source {
	return &Source{Ch: make(chan sampler.Event, n), Counts: map[string]uint64{}}
}

// Sample queues a sample.
func (s *Source) Sample(r *sampler.Record) { s.Ch <- sampler.Event{Sample: r} }

// Proc queues a process event.
func (s *Source) Proc(e sampler.ProcEvent) { s.Ch <- sampler.Event{Proc: &e} }

// Events returns the event channel.
func (s *Source) Events() <-chan sampler.Event { return s.Ch }

// Counters returns Counts.
func (s *Source) Counters() (map[string]uint64, error) { return s.Counts, nil }

// Stop closes the channel, once.
func (s *Source) Stop() {
	if s.Stopped.CompareAndSwap(false, true) {
		close(s.Ch)
	}
}
