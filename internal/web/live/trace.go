package live

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// SpanView is one span of a trace view: what the trace export said
// (Exported) and what the profiles say.
type SpanView struct {
	SpanID       string `json:"span_id"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	// Exported is false for a span only profile samples name: no trace
	// export carried it (yet, or it was evicted, or it was not sampled by
	// the tracer).
	Exported bool      `json:"exported"`
	Name     string    `json:"name,omitempty"`
	Service  string    `json:"service,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	Status   string    `json:"status,omitempty"`
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	WallNs   int64     `json:"wall_ns"`
	// Depth is the span's depth under the trace's roots, for indenting.
	Depth int `json:"depth"`

	// Samples counts profile events linked to the span, on and off CPU,
	// that fall in its exported time (all of them for a span no export
	// carried); the figures below count those.
	Samples      int   `json:"samples"`
	OnCPUSamples int   `json:"on_cpu_samples"`
	OnCPUNs      int64 `json:"on_cpu_ns"`
	OffCPUNs     int64 `json:"off_cpu_ns"`
	// OffCPUByReason and OffCPUByState split OffCPUNs by the kernel wait
	// function and by the thread state (S, D).
	OffCPUByReason map[string]int64 `json:"off_cpu_by_reason,omitempty"`
	OffCPUByState  map[string]int64 `json:"off_cpu_by_state,omitempty"`
	// OnCPUShare and OffCPUShare are the fractions of WallNs each covers
	// (0 without a wall time).
	OnCPUShare  float64 `json:"on_cpu_share"`
	OffCPUShare float64 `json:"off_cpu_share"`
	// Processes lists the processes the span's samples came from.
	Processes   []ProcessRef `json:"processes,omitempty"`
	Threads     []uint32     `json:"threads,omitempty"`
	FirstSample time.Time    `json:"first_sample,omitzero"`
	LastSample  time.Time    `json:"last_sample,omitzero"`
	// ByThread splits the span's time by thread; the goroutine sampler's
	// waits of parked goroutines are one entry with tid 0.
	ByThread []ThreadTime `json:"by_thread,omitempty"`
	// OutsideSamples and OutsideNs count the weight of samples linked to
	// the span but taken outside its exported start and end: goroutines
	// or threads that kept the span's context after it ended.
	OutsideSamples int   `json:"outside_span_samples"`
	OutsideNs      int64 `json:"outside_span_ns"`
}

// ThreadTime is a span's time on one thread.
type ThreadTime struct {
	PID      uint32 `json:"pid"`
	TID      uint32 `json:"tid"`
	Name     string `json:"name,omitempty"`
	OnCPUNs  int64  `json:"on_cpu_ns"`
	OffCPUNs int64  `json:"off_cpu_ns"`
}

// ProcessRef names a sampled process.
type ProcessRef struct {
	PID     uint32 `json:"pid"`
	Exe     string `json:"exe,omitempty"`
	Service string `json:"service,omitempty"`
}

// TraceView is everything the window knows about one trace.
type TraceView struct {
	TraceID string `json:"trace_id"`
	// Spans holds the exported spans, parents before children, siblings
	// by start time, then the spans only samples name.
	Spans      []SpanView `json:"spans"`
	Start      time.Time  `json:"start,omitzero"`
	End        time.Time  `json:"end,omitzero"`
	Services   []string   `json:"services"`
	Unexported int        `json:"unexported_spans"`
	NoSamples  int        `json:"spans_without_samples"`
	Window     Stats      `json:"window"`
}

// snapshot copies what a view needs under the lock; batches are immutable
// once added, so the copy of their headers is enough.
func (s *Store) snapshot(trace *[16]byte) ([]batch, []Span, Stats) {
	st := s.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := append([]batch(nil), s.batches...)
	var spans []Span
	for _, e := range s.spans {
		if trace == nil || e.span.TraceID == *trace {
			spans = append(spans, e.span)
		}
	}
	return bs, spans, st
}

// ParseTraceID decodes a 32-digit hex trace id.
func ParseTraceID(s string) ([16]byte, error) {
	var id [16]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("parse trace id %q: want 32 hex digits", s)
	}
	return [16]byte(b), nil
}

// Trace returns the view of one trace; ok is false when the window holds
// neither a span nor a sample of it.
func (s *Store) Trace(id [16]byte) (TraceView, bool) {
	bs, spans, st := s.snapshot(&id)
	var events []Event
	for _, b := range bs {
		period := b.p.PeriodNanos()
		for _, i := range b.byTrace[id] {
			smp := &b.p.Samples[i]
			events = append(events, Event{Sample: smp, Period: period, Process: b.p.Processes[smp.PID]})
		}
	}
	return BuildTrace(id, spans, events, st)
}

// Event is one profile sample as the trace views read it: the sample, the
// on-CPU period of the profile it came in and its process (nil when the
// profile did not describe it). The in-memory window and other stores
// hand the same events to BuildTrace, BuildTraces and BuildSpanFlame, so
// their figures agree.
type Event struct {
	Sample  *profile.Sample
	Period  int64
	Process *profile.Process
}

// BuildTrace makes the view of trace id from its exported spans and the
// events linked to it; ok is false when there are neither. st is the
// window's line the view carries.
func BuildTrace(id [16]byte, spans []Span, events []Event, st Stats) (TraceView, bool) {
	views := map[[8]byte]*SpanView{}
	windows := map[[8]byte]spanWindow{}
	for _, sp := range spans {
		windows[sp.SpanID] = windowOf(sp)
		v := &SpanView{SpanID: hex.EncodeToString(sp.SpanID[:]), Exported: true, Name: sp.Name, Service: sp.Service,
			Kind: sp.Kind, Status: sp.Status, Start: sp.Start, End: sp.End, WallNs: sp.End.Sub(sp.Start).Nanoseconds()}
		if sp.ParentSpanID != ([8]byte{}) {
			v.ParentSpanID = hex.EncodeToString(sp.ParentSpanID[:])
		}
		views[sp.SpanID] = v
	}
	procs := map[[8]byte]map[uint32]bool{}
	threads := map[[8]byte]map[uint32]bool{}
	type threadKey struct {
		span     [8]byte
		pid, tid uint32
	}
	byThread := map[threadKey]int{}
	for _, e := range events {
		smp, period := e.Sample, e.Period
		v := views[smp.Link.SpanID]
		if v == nil {
			v = &SpanView{SpanID: smp.Link.SpanIDHex()}
			views[smp.Link.SpanID] = v
			procs[smp.Link.SpanID], threads[smp.Link.SpanID] = map[uint32]bool{}, map[uint32]bool{}
		}
		if procs[smp.Link.SpanID] == nil {
			procs[smp.Link.SpanID], threads[smp.Link.SpanID] = map[uint32]bool{}, map[uint32]bool{}
		}
		in, out := windows[smp.Link.SpanID].split(smp, period)
		if in == 0 && out > 0 {
			v.OutsideSamples++
			v.OutsideNs += out
			continue
		}
		v.OutsideNs += out
		addSample(v, smp, in)
		tk := threadKey{smp.Link.SpanID, smp.PID, smp.TID}
		j, ok := byThread[tk]
		if !ok {
			j = len(v.ByThread)
			byThread[tk] = j
			v.ByThread = append(v.ByThread, ThreadTime{PID: smp.PID, TID: smp.TID, Name: smp.ThreadName})
		}
		if smp.Kind == profile.OffCPU {
			v.ByThread[j].OffCPUNs += in
		} else {
			v.ByThread[j].OnCPUNs += in
		}
		if !procs[smp.Link.SpanID][smp.PID] {
			procs[smp.Link.SpanID][smp.PID] = true
			ref := ProcessRef{PID: smp.PID}
			if pr := e.Process; pr != nil {
				ref.Exe, ref.Service = pr.ExeName, pr.ServiceName
			}
			v.Processes = append(v.Processes, ref)
		}
		if !threads[smp.Link.SpanID][smp.TID] {
			threads[smp.Link.SpanID][smp.TID] = true
			v.Threads = append(v.Threads, smp.TID)
		}
	}
	if len(views) == 0 {
		return TraceView{}, false
	}
	tv := TraceView{TraceID: hex.EncodeToString(id[:]), Window: st, Services: []string{}}
	services := map[string]bool{}
	for _, v := range views {
		if v.WallNs > 0 {
			v.OnCPUShare = float64(v.OnCPUNs) / float64(v.WallNs)
			v.OffCPUShare = float64(v.OffCPUNs) / float64(v.WallNs)
		}
		if !v.Exported {
			tv.Unexported++
			// A span no export carried still gets a service from its
			// process, so the table can say where it ran.
			for _, p := range v.Processes {
				if p.Service != "" && v.Service == "" {
					v.Service = p.Service
				}
			}
		} else if v.Samples == 0 {
			tv.NoSamples++
		}
		if v.Service != "" && !services[v.Service] {
			services[v.Service] = true
			tv.Services = append(tv.Services, v.Service)
		}
		start, end := v.Start, v.End
		if !v.Exported {
			start, end = v.FirstSample, v.LastSample
		}
		if !start.IsZero() && (tv.Start.IsZero() || start.Before(tv.Start)) {
			tv.Start = start
		}
		if end.After(tv.End) {
			tv.End = end
		}
		slices.Sort(v.Threads)
		slices.SortFunc(v.ByThread, func(a, b ThreadTime) int { return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.TID, b.TID)) })
	}
	slices.Sort(tv.Services)
	tv.Spans = order(views)
	return tv, true
}

// addSample adds a sample whose weight inside the span is ns.
func addSample(v *SpanView, smp *profile.Sample, ns int64) {
	v.Samples++
	if smp.Kind == profile.OffCPU {
		v.OffCPUNs += ns
		if v.OffCPUByReason == nil {
			v.OffCPUByReason, v.OffCPUByState = map[string]int64{}, map[string]int64{}
		}
		reason, state := smp.Reason, smp.State
		if reason == "" {
			reason = "unknown"
		}
		if state == "" {
			state = "unknown"
		}
		v.OffCPUByReason[reason] += ns
		v.OffCPUByState[state] += ns
	} else {
		v.OnCPUSamples += int(smp.Value)
		v.OnCPUNs += ns
	}
	if !smp.Time.IsZero() {
		// An off-CPU event's time is when the thread ran again; the
		// span's first activity is the start of that wait.
		start := smp.Time
		if smp.Kind == profile.OffCPU {
			start = start.Add(-time.Duration(ns))
		}
		if v.FirstSample.IsZero() || start.Before(v.FirstSample) {
			v.FirstSample = start
		}
		if smp.Time.After(v.LastSample) {
			v.LastSample = smp.Time
		}
	}
}

// order lays spans out as a tree: roots (no parent, or a parent the
// window lacks) by start time, each followed by its children; the spans
// only samples name come last.
func order(views map[[8]byte]*SpanView) []SpanView {
	children := map[string][]*SpanView{}
	var roots, orphans []*SpanView
	byID := map[string]bool{}
	for _, v := range views {
		if v.Exported {
			byID[v.SpanID] = true
		}
	}
	for _, v := range views {
		switch {
		case !v.Exported:
			orphans = append(orphans, v)
		case v.ParentSpanID == "" || !byID[v.ParentSpanID]:
			roots = append(roots, v)
		default:
			children[v.ParentSpanID] = append(children[v.ParentSpanID], v)
		}
	}
	byStart := func(a, b *SpanView) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.SpanID, b.SpanID))
	}
	out := make([]SpanView, 0, len(views))
	var walk func(v *SpanView, depth int)
	walk = func(v *SpanView, depth int) {
		v.Depth = depth
		out = append(out, *v)
		kids := children[v.SpanID]
		slices.SortFunc(kids, byStart)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	slices.SortFunc(roots, byStart)
	for _, r := range roots {
		walk(r, 0)
	}
	slices.SortFunc(orphans, func(a, b *SpanView) int {
		return cmp.Or(a.FirstSample.Compare(b.FirstSample), cmp.Compare(a.SpanID, b.SpanID))
	})
	for _, o := range orphans {
		out = append(out, *o)
	}
	return out
}
