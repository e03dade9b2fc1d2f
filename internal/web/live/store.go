// Package live keeps what `spanprof serve --otlp-listen` receives (OTLP
// profiles and OTLP traces) in a bounded in-memory window, and answers
// per-trace and per-span questions from it: the trace view and its JSON
// API. The window is bounded by the number of samples, the number of spans
// and an age; whatever leaves it early is counted, never dropped silently.
package live

import (
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// Limits bound the window. A zero field takes its default.
type Limits struct {
	// MaxSamples is the most profile samples (events) kept.
	MaxSamples int
	// MaxBytes bounds the heap the kept samples hold, as batchBytes
	// estimates it (stacks, strings and indexes included).
	MaxBytes int64
	// MaxSpans is the most exported spans kept.
	MaxSpans int
	// MaxAge drops batches and spans received longer ago than this.
	MaxAge time.Duration
}

// DefaultLimits keep a few minutes of 200 busy processes, or 15 minutes
// of a smaller host, in a few hundred MiB: an hour's stream from 200
// processes held serve at 500 MiB RSS (525 peak) with 256 MiB of samples
// (docs/ui.md). A million samples of real stacks held about 770 MiB of
// heap, so the byte budget is what binds at the default; the count bounds
// a stream of tiny stacks.
var DefaultLimits = Limits{MaxSamples: 1_000_000, MaxBytes: 256 << 20, MaxSpans: 200_000, MaxAge: 15 * time.Minute}

func (l Limits) withDefaults() Limits {
	if l.MaxSamples <= 0 {
		l.MaxSamples = DefaultLimits.MaxSamples
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxSpans <= 0 {
		l.MaxSpans = DefaultLimits.MaxSpans
	}
	if l.MaxAge <= 0 {
		l.MaxAge = DefaultLimits.MaxAge
	}
	return l
}

// Span is one span as an OTLP trace export carried it.
type Span struct {
	TraceID      [16]byte
	SpanID       [8]byte
	ParentSpanID [8]byte
	Name         string
	Service      string
	Kind         string
	Start, End   time.Time
	// Status is the OTLP status code name ("Unset", "Ok", "Error").
	Status string
}

type batch struct {
	received time.Time
	p        *profile.Profile
	// bytes is batchBytes, fixed when the batch arrives.
	bytes int64
	// byTrace indexes p.Samples by trace id, so a trace view reads only
	// its own samples.
	byTrace map[[16]byte][]int32
}

type spanEntry struct {
	received time.Time
	span     Span
}

type spanKey struct {
	trace [16]byte
	span  [8]byte
}

// Stats describes the window: what it holds and what it evicted.
type Stats struct {
	Batches int `json:"batches"`
	Samples int `json:"samples"`
	// Bytes is the estimated heap the samples hold (batchBytes).
	Bytes  int64 `json:"bytes"`
	Spans  int   `json:"spans"`
	Traces int   `json:"traces"`
	// Received counts everything ever accepted.
	ReceivedBatches uint64 `json:"received_batches"`
	ReceivedSamples uint64 `json:"received_samples"`
	ReceivedSpans   uint64 `json:"received_spans"`
	// Evicted counts what left the window, by limit.
	// EvictedSamplesSize counts samples evicted by the sample count,
	// EvictedSamplesBytes those evicted by the byte budget.
	EvictedSamplesSize  uint64 `json:"evicted_samples_size"`
	EvictedSamplesBytes uint64 `json:"evicted_samples_bytes"`
	EvictedSamplesAge   uint64 `json:"evicted_samples_age"`
	EvictedSpansSize    uint64 `json:"evicted_spans_size"`
	EvictedSpansAge     uint64 `json:"evicted_spans_age"`
	// Rejected counts export requests that could not be decoded.
	Rejected uint64 `json:"rejected"`
	// Version changes whenever the window changes; pages poll it.
	Version    uint64 `json:"version"`
	MaxSamples int    `json:"max_samples"`
	MaxBytes   int64  `json:"max_bytes"`
	MaxSpans   int    `json:"max_spans"`
	MaxAgeSec  int64  `json:"max_age_seconds"`
	// Oldest is the receive time of the oldest data in the window.
	Oldest time.Time `json:"oldest,omitzero"`
	// Store describes a database store (serve --store); nil for the
	// in-memory window.
	Store *StoreStats `json:"store,omitempty"`
}

// StoreStats is the state of a database store as one serve instance sees
// it: where it is, whether writes succeed, and what waits or was dropped.
type StoreStats struct {
	URL string `json:"url"`
	// Status is "ok", "connecting" (nothing written yet) or "failing"
	// (Error says why, since ErrorSince; exports are buffered).
	Status     string    `json:"status"`
	Error      string    `json:"error,omitempty"`
	ErrorSince time.Time `json:"error_since,omitzero"`
	// BufferedBatches and BufferedBytes wait for the database; past
	// MaxBufferBytes the oldest are dropped, counted in Dropped*.
	BufferedBatches int    `json:"buffered_batches"`
	BufferedBytes   int64  `json:"buffered_bytes"`
	MaxBufferBytes  int64  `json:"max_buffer_bytes"`
	DroppedBatches  uint64 `json:"dropped_batches"`
	DroppedSamples  uint64 `json:"dropped_samples"`
	DroppedSpans    uint64 `json:"dropped_spans"`
	// DuplicateBatches counts profile exports received again (an
	// agent's retry) and not written twice.
	DuplicateBatches uint64 `json:"duplicate_batches"`
	// RefusedBusy counts exports refused with UNAVAILABLE while the
	// buffer was nearly full (the sender retries them).
	RefusedBusy     uint64    `json:"refused_busy"`
	ReceivedBatches uint64    `json:"received_batches"`
	WrittenBatches  uint64    `json:"written_batches"`
	WrittenSamples  uint64    `json:"written_samples"`
	WrittenSpans    uint64    `json:"written_spans"`
	WrittenStacks   uint64    `json:"written_stacks"`
	FlushErrors     uint64    `json:"flush_errors"`
	LastFlush       time.Time `json:"last_flush,omitzero"`
	LastFlushMs     float64   `json:"last_flush_ms"`
	// TableRows, Stacks and DiskBytes are the tables' as of the last
	// count, every instance's writes included.
	TableRows     uint64 `json:"table_rows"`
	Stacks        uint64 `json:"stacks"`
	DiskBytes     uint64 `json:"disk_bytes"`
	RetentionDays int    `json:"retention_days"`
}

// Store is the window. It is safe for concurrent use.
type Store struct {
	limits Limits
	now    func() time.Time

	mu      sync.Mutex
	batches []batch
	samples int
	bytes   int64
	spans   []spanEntry // in receive order
	index   map[spanKey]int
	// spanBase is the number of entries removed from the front of spans,
	// so index values stay valid without rewriting them.
	spanBase int
	stats    Stats
	merged   *profile.Profile
	mergedAt uint64
}

// NewStore returns an empty window with limits l (zero fields default).
func NewStore(l Limits) *Store {
	return &Store{limits: l.withDefaults(), now: time.Now, index: map[spanKey]int{}}
}

// AddProfile adds one received profile (one export request).
func (s *Store) AddProfile(p *profile.Profile) {
	b := batch{p: p, byTrace: map[[16]byte][]int32{}}
	for i := range p.Samples {
		if l := p.Samples[i].Link; !l.IsZero() {
			b.byTrace[l.TraceID] = append(b.byTrace[l.TraceID], int32(i))
		}
	}
	b.bytes = batchBytes(&b)
	s.mu.Lock()
	defer s.mu.Unlock()
	b.received = s.now()
	s.batches = append(s.batches, b)
	s.samples += len(p.Samples)
	s.bytes += b.bytes
	s.stats.ReceivedBatches++
	s.stats.ReceivedSamples += uint64(len(p.Samples))
	s.stats.Version++
	s.evictLocked()
}

// AddSpans adds spans from one trace export. A span received again (a
// retried export) replaces the earlier copy.
func (s *Store) AddSpans(spans []Span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, sp := range spans {
		k := spanKey{sp.TraceID, sp.SpanID}
		if i, ok := s.index[k]; ok {
			s.spans[i-s.spanBase].span = sp
			continue
		}
		s.index[k] = len(s.spans) + s.spanBase
		s.spans = append(s.spans, spanEntry{received: now, span: sp})
	}
	s.stats.ReceivedSpans += uint64(len(spans))
	s.stats.Version++
	s.evictLocked()
}

// Reject counts an export request that could not be decoded.
func (s *Store) Reject() {
	s.mu.Lock()
	s.stats.Rejected++
	s.stats.Version++
	s.mu.Unlock()
}

// Evict applies the age limit now; the receiver calls it periodically so
// an idle window still ages out.
func (s *Store) Evict() {
	s.mu.Lock()
	s.evictLocked()
	s.mu.Unlock()
}

// evictLocked applies the limits; the callers bump Version for what they
// added, eviction for what it removed.
func (s *Store) evictLocked() {
	cutoff := s.now().Add(-s.limits.MaxAge)
	drop := 0
	for drop < len(s.batches) && (s.batches[drop].received.Before(cutoff) || s.samples > s.limits.MaxSamples || s.bytes > s.limits.MaxBytes) {
		n := len(s.batches[drop].p.Samples)
		switch {
		case s.batches[drop].received.Before(cutoff):
			s.stats.EvictedSamplesAge += uint64(n)
		case s.samples > s.limits.MaxSamples:
			s.stats.EvictedSamplesSize += uint64(n)
		default:
			s.stats.EvictedSamplesBytes += uint64(n)
		}
		s.samples -= n
		s.bytes -= s.batches[drop].bytes
		s.batches[drop] = batch{}
		drop++
	}
	s.batches = s.batches[drop:]
	if drop > 0 {
		s.stats.Version++
	}
	drop = 0
	for drop < len(s.spans) && (s.spans[drop].received.Before(cutoff) || len(s.spans)-drop > s.limits.MaxSpans) {
		if s.spans[drop].received.Before(cutoff) {
			s.stats.EvictedSpansAge++
		} else {
			s.stats.EvictedSpansSize++
		}
		sp := s.spans[drop].span
		delete(s.index, spanKey{sp.TraceID, sp.SpanID})
		drop++
	}
	if drop > 0 {
		// Copy rather than reslice so the evicted spans' memory is freed.
		s.spans = append([]spanEntry(nil), s.spans[drop:]...)
		s.spanBase += drop
		s.stats.Version++
	}
}

// Stats returns the window's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Batches, st.Samples, st.Bytes, st.Spans = len(s.batches), s.samples, s.bytes, len(s.spans)
	traces := map[[16]byte]bool{}
	for _, e := range s.spans {
		traces[e.span.TraceID] = true
	}
	for _, b := range s.batches {
		for t := range b.byTrace {
			traces[t] = true
		}
	}
	st.Traces = len(traces)
	st.MaxSamples, st.MaxBytes, st.MaxSpans, st.MaxAgeSec = s.limits.MaxSamples, s.limits.MaxBytes, s.limits.MaxSpans, int64(s.limits.MaxAge/time.Second)
	if len(s.batches) > 0 {
		st.Oldest = s.batches[0].received
	}
	if len(s.spans) > 0 && (st.Oldest.IsZero() || s.spans[0].received.Before(st.Oldest)) {
		st.Oldest = s.spans[0].received
	}
	return st
}

// Profile returns every sample in the window as one profile, for the
// flame graph page. The result is shared and must not be modified; it is
// the same pointer until the window changes.
func (s *Store) Profile() (*profile.Profile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.merged != nil && s.mergedAt == s.stats.Version {
		return s.merged, nil
	}
	out := &profile.Profile{Processes: map[uint32]*profile.Process{}, Samples: make([]profile.Sample, 0, s.samples)}
	for _, b := range s.batches {
		p := b.p
		if out.Start.IsZero() || (!p.Start.IsZero() && p.Start.Before(out.Start)) {
			out.Start = p.Start
		}
		if p.End.After(out.End) {
			out.End = p.End
		}
		if out.Frequency == 0 {
			out.Frequency = p.Frequency
		}
		for pid, pr := range p.Processes {
			out.Processes[pid] = pr
		}
		out.Samples = append(out.Samples, p.Samples...)
		for k, v := range p.Lost {
			if out.Lost == nil {
				out.Lost = map[string]uint64{}
			}
			out.Lost[k] += v
		}
	}
	s.merged, s.mergedAt = out, s.stats.Version
	return out, nil
}
