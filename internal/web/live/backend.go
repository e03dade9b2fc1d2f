package live

import (
	"github.com/spanprof/spanprof/internal/profile"
)

// Backend is where the receiver puts what it decodes and where the pages
// and the JSON API read from: the in-memory window (Store) or a database
// (internal/web/live/chstore). Both answer through BuildTrace,
// BuildTraces and BuildSpanFlame, so the JSON is the same.
type Backend interface {
	// AddProfile takes one decoded profile export; AddSpans one trace
	// export's spans. Neither fails: a store that cannot keep them counts
	// what it drops in Stats.
	AddProfile(p *profile.Profile)
	AddSpans(spans []Span)
	// Reject counts an export request that could not be decoded.
	Reject()
	// Evict applies the store's age limits; the receiver calls it every
	// second.
	Evict()
	Stats() Stats
	// Profile is the flame graph page's profile of the whole window.
	Profile() (*profile.Profile, error)
	// TraceView, TraceList and Flame answer /api/trace/ID, /api/traces
	// and /api/trace/ID/flame; an error means the store could not be
	// read, ok false that it holds nothing of the trace.
	TraceView(id [16]byte) (tv TraceView, ok bool, err error)
	TraceList(limit int) ([]TraceSummary, error)
	Flame(trace [16]byte, span [8]byte, k profile.Kind) (*FlameNode, error)
}

var _ Backend = (*Store)(nil)

// TraceView implements Backend.
func (s *Store) TraceView(id [16]byte) (TraceView, bool, error) {
	tv, ok := s.Trace(id)
	return tv, ok, nil
}

// TraceList implements Backend.
func (s *Store) TraceList(limit int) ([]TraceSummary, error) { return s.Traces(limit), nil }

// Flame implements Backend.
func (s *Store) Flame(trace [16]byte, span [8]byte, k profile.Kind) (*FlameNode, error) {
	return s.SpanFlame(trace, span, k), nil
}

// Admitter is implemented by a store that can fall behind (a database
// that is down or slow): the receiver asks it before decoding an export
// and, when it refuses, answers UNAVAILABLE, which agents and the
// collector's OTLP exporter retry later. The buffering moves to the
// senders instead of exports being dropped here.
type Admitter interface {
	Admit() error
}
