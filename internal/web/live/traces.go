package live

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// TraceSummary is one row of the trace list.
type TraceSummary struct {
	TraceID string    `json:"trace_id"`
	Root    string    `json:"root,omitempty"`
	Service string    `json:"service,omitempty"`
	Start   time.Time `json:"start,omitzero"`
	WallNs  int64     `json:"wall_ns"`
	// Spans counts exported spans; SampledSpans the spans (exported or
	// not) that profile samples name.
	Spans        int   `json:"spans"`
	SampledSpans int   `json:"sampled_spans"`
	OnCPUNs      int64 `json:"on_cpu_ns"`
	OffCPUNs     int64 `json:"off_cpu_ns"`
}

// Traces lists the traces in the window, newest first, at most limit
// (all when limit ≤ 0).
func (s *Store) Traces(limit int) []TraceSummary {
	bs, spans, _ := s.snapshot(nil)
	return BuildTraces(spans, func(yield func(trace [16]byte, e Event)) {
		for _, b := range bs {
			period := b.p.PeriodNanos()
			for id, idx := range b.byTrace {
				for _, i := range idx {
					yield(id, Event{Sample: &b.p.Samples[i], Period: period})
				}
			}
		}
	}, limit)
}

// BuildTraces makes the trace list from exported spans and the linked
// events that each calls yield with (their Process is not read), newest
// first, at most limit (all when limit ≤ 0).
func BuildTraces(spans []Span, events func(yield func(trace [16]byte, e Event)), limit int) []TraceSummary {
	windows := make(map[spanKey]spanWindow, len(spans))
	for _, sp := range spans {
		windows[spanKey{sp.TraceID, sp.SpanID}] = windowOf(sp)
	}
	rows := map[[16]byte]*TraceSummary{}
	ends := map[[16]byte]time.Time{}
	row := func(id [16]byte) *TraceSummary {
		r := rows[id]
		if r == nil {
			r = &TraceSummary{TraceID: hex.EncodeToString(id[:])}
			rows[id] = r
		}
		return r
	}
	for _, sp := range spans {
		r := row(sp.TraceID)
		r.Spans++
		if r.Start.IsZero() || sp.Start.Before(r.Start) {
			r.Start = sp.Start
		}
		if sp.End.After(ends[sp.TraceID]) {
			ends[sp.TraceID] = sp.End
		}
		if sp.ParentSpanID == ([8]byte{}) || r.Root == "" {
			r.Root, r.Service = sp.Name, sp.Service
		}
	}
	sampled := map[spanKey]bool{}
	events(func(id [16]byte, e Event) {
		smp := e.Sample
		r := row(id)
		k := spanKey{id, smp.Link.SpanID}
		in, _ := windows[k].split(smp, e.Period)
		if in == 0 {
			return // outside its span's time: the trace view counts it
		}
		if !sampled[k] {
			sampled[k] = true
			r.SampledSpans++
		}
		if smp.Kind == profile.OffCPU {
			r.OffCPUNs += in
		} else {
			r.OnCPUNs += in
		}
		if r.Spans == 0 && !smp.Time.IsZero() && (r.Start.IsZero() || smp.Time.Before(r.Start)) {
			r.Start = smp.Time
		}
	})
	out := make([]TraceSummary, 0, len(rows))
	for id, r := range rows {
		if e := ends[id]; !e.IsZero() {
			r.WallNs = e.Sub(r.Start).Nanoseconds()
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b TraceSummary) int {
		return cmp.Or(b.Start.Compare(a.Start), cmp.Compare(a.TraceID, b.TraceID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// FlameNode is one frame of a span's flame graph; Value is nanoseconds
// (on-CPU: samples × period; off-CPU: time blocked).
type FlameNode struct {
	Name     string       `json:"name"`
	Value    int64        `json:"value"`
	Children []*FlameNode `json:"children,omitempty"`
}

func (n *FlameNode) child(name string) *FlameNode {
	for _, c := range n.Children {
		if c.Name == name {
			return c
		}
	}
	c := &FlameNode{Name: name}
	n.Children = append(n.Children, c)
	return c
}

// SpanFlame builds the flame graph of one span's samples of kind k, root
// ("all") first, then the process, then the frames from the entry to the
// leaf. Like the trace view, it weighs only what falls in the span's
// exported time.
func (s *Store) SpanFlame(trace [16]byte, span [8]byte, k profile.Kind) *FlameNode {
	bs, spans, _ := s.snapshot(&trace)
	var events []Event
	for _, b := range bs {
		period := b.p.PeriodNanos()
		for _, i := range b.byTrace[trace] {
			smp := &b.p.Samples[i]
			if smp.Link.SpanID == span && smp.Kind == k {
				events = append(events, Event{Sample: smp, Period: period, Process: b.p.Processes[smp.PID]})
			}
		}
	}
	return BuildSpanFlame(span, spans, events, k)
}

// BuildSpanFlame makes SpanFlame's graph from the trace's exported spans
// and its events; events of other spans or kinds are skipped.
func BuildSpanFlame(span [8]byte, spans []Span, events []Event, k profile.Kind) *FlameNode {
	var w spanWindow
	for _, sp := range spans {
		if sp.SpanID == span {
			w = windowOf(sp)
		}
	}
	root := &FlameNode{Name: "all"}
	for _, e := range events {
		smp := e.Sample
		if smp.Link.SpanID != span || smp.Kind != k {
			continue
		}
		v, _ := w.split(smp, e.Period)
		if v == 0 {
			continue
		}
		root.Value += v
		proc := fmt.Sprintf("pid %d", smp.PID)
		if pr := e.Process; pr != nil && pr.ExeName != "" {
			proc = fmt.Sprintf("%s %d", pr.ExeName, smp.PID)
		}
		n := root.child(proc)
		n.Value += v
		for j := len(smp.Frames) - 1; j >= 0; j-- {
			n = n.child(frameName(smp.Frames[j]))
			n.Value += v
		}
	}
	sortFlame(root)
	return root
}

func sortFlame(n *FlameNode) {
	slices.SortFunc(n.Children, func(a, b *FlameNode) int { return cmp.Or(cmp.Compare(b.Value, a.Value), cmp.Compare(a.Name, b.Name)) })
	for _, c := range n.Children {
		sortFlame(c)
	}
}

// frameName names a frame as the flame graph page does: the function, else
// the file and offset, else the address.
func frameName(f profile.Frame) string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Mapping != nil && f.Mapping.Path != "":
		return fmt.Sprintf("%s+0x%x", f.Mapping.Path, f.Address-f.Mapping.Start+f.Mapping.Offset)
	default:
		return fmt.Sprintf("0x%x", f.Address)
	}
}
