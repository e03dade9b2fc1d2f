// Package pipelinetest holds a fake pipeline.Source, so that the stages
// after the sampler are tested without loading programs into the kernel.
package pipelinetest

import (
	"sync/atomic"

	"github.com/spanprof/spanprof/internal/sampler"
)

// Source stands in for the eBPF sampler: a test writes to Recs and
// Procs, and Stop closes them as the sampler does once its ring is
// drained.
type Source struct {
	Recs   chan *sampler.Record
	Procs  chan sampler.ProcEvent
	Counts map[string]uint64
	// Stopped is set by Stop.
	Stopped atomic.Bool
}

// NewSource returns a source whose channels queue records and events.
func NewSource(records, events int) *Source {
	return &Source{Recs: make(chan *sampler.Record, records), Procs: make(chan sampler.ProcEvent, events),
		Counts: map[string]uint64{}}
}

// Records returns the records channel.
func (s *Source) Records() <-chan *sampler.Record { return s.Recs }

// ProcEvents returns the process events channel.
func (s *Source) ProcEvents() <-chan sampler.ProcEvent { return s.Procs }

// Counters returns Counts.
func (s *Source) Counters() (map[string]uint64, error) { return s.Counts, nil }

// Stop closes both channels, once.
func (s *Source) Stop() {
	if s.Stopped.CompareAndSwap(false, true) {
		close(s.Recs)
		close(s.Procs)
	}
}
