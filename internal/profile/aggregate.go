package profile

import (
	"encoding/binary"
	"sort"
)

// GroupKey is everything two samples must share to be merged by an
// exporter. The span link, thread and wait state are part of it so that no
// exporter can fold samples of different spans or threads together.
type GroupKey struct {
	PID        uint32
	Kind       Kind
	Stack      int32 // index into Aggregate.Stacks
	Link       Link
	TID        uint32
	ThreadName string
	State      string
	Reason     string
}

// Group is the set of events that share one GroupKey. Times and Values are
// parallel, one entry per event, in the order the events were recorded, so
// OTLP can keep per-event timestamps.
type Group struct {
	GroupKey
	// Times holds each event's CLOCK_REALTIME time in Unix nanoseconds;
	// 0 when the sample had no time.
	Times  []uint64
	Values []int64
	// Total is the sum of Values.
	Total int64
}

// Aggregate is a Profile's samples deduplicated once, so that every
// exporter works on unique frames and stacks instead of raw events.
type Aggregate struct {
	// Frames holds each distinct frame once.
	Frames []Frame
	// Stacks holds, per stack id, indices into Frames, leaf first.
	Stacks [][]int32
	// Groups is ordered by PID, then Kind, then first appearance.
	Groups []Group
}

// NewAggregate groups the samples of p by GroupKey.
func NewAggregate(p *Profile) *Aggregate {
	a := &Aggregate{}
	frameIDs := make(map[Frame]int32)
	stackIDs := make(map[string]int32)
	groupIDs := make(map[GroupKey]int32)
	var key []byte
	var ids []int32
	for i := range p.Samples {
		s := &p.Samples[i]
		key, ids = key[:0], ids[:0]
		for _, f := range s.Frames {
			id, ok := frameIDs[f]
			if !ok {
				id = int32(len(a.Frames))
				a.Frames = append(a.Frames, f)
				frameIDs[f] = id
			}
			ids = append(ids, id)
			key = binary.LittleEndian.AppendUint32(key, uint32(id))
		}
		stack, ok := stackIDs[string(key)]
		if !ok {
			stack = int32(len(a.Stacks))
			a.Stacks = append(a.Stacks, append([]int32(nil), ids...))
			stackIDs[string(key)] = stack
		}
		gk := GroupKey{
			PID: s.PID, Kind: s.Kind, Stack: stack, Link: s.Link,
			TID: s.TID, ThreadName: s.ThreadName, State: s.State, Reason: s.Reason,
		}
		g, ok := groupIDs[gk]
		if !ok {
			g = int32(len(a.Groups))
			a.Groups = append(a.Groups, Group{GroupKey: gk})
			groupIDs[gk] = g
		}
		grp := &a.Groups[g]
		grp.Times = append(grp.Times, unixNanos(s))
		grp.Values = append(grp.Values, s.Value)
		grp.Total += s.Value
	}
	sort.SliceStable(a.Groups, func(i, j int) bool {
		gi, gj := &a.Groups[i], &a.Groups[j]
		if gi.PID != gj.PID {
			return gi.PID < gj.PID
		}
		return gi.Kind < gj.Kind
	})
	return a
}

func unixNanos(s *Sample) uint64 {
	if s.Time.IsZero() {
		return 0
	}
	n := s.Time.UnixNano()
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// PIDs returns the processes that have samples, in ascending order.
func (a *Aggregate) PIDs() []uint32 {
	var pids []uint32
	for i := range a.Groups {
		if n := len(pids); n == 0 || pids[n-1] != a.Groups[i].PID {
			pids = append(pids, a.Groups[i].PID)
		}
	}
	return pids
}

// Locations splits a leaf-first stack of frame ids into machine locations:
// a frame marked Inlined belongs to the same location as the frame after
// it, so each run ends at the first non-inlined frame. Within a run the
// innermost function comes first and the physical caller last, which is
// the line order both OTLP and pprof use.
func (a *Aggregate) Locations(stack []int32) [][]int32 {
	var locs [][]int32
	start := 0
	for i, id := range stack {
		if a.Frames[id].Inlined && i+1 < len(stack) {
			continue
		}
		locs = append(locs, stack[start:i+1])
		start = i + 1
	}
	return locs
}
