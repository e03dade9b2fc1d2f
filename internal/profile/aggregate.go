package profile

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// GroupKey is everything two samples must share to be merged by an
// exporter. The span link, thread, wait state and thread-context
// attributes are part of it so that no exporter can fold samples of
// different spans, threads or attributes together.
type GroupKey struct {
	PID        uint32
	Kind       Kind
	Stack      int32 // index into Aggregate.Stacks
	Link       Link
	TID        uint32
	ThreadName string
	State      string
	Reason     string
	Attrs      Attrs
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
	g := NewAggregator()
	for i := range p.Samples {
		g.Add(&p.Samples[i])
	}
	return g.Finish()
}

// Aggregator builds an Aggregate one sample at a time, so that a producer
// of many samples need not hold them all: the agent's report of 200
// processes with off-CPU sampling has some 42,000 samples over a few
// thousand groups.
type Aggregator struct {
	a        *Aggregate
	in       interner
	groupIDs map[GroupKey]int32
	samples  int
}

// NewAggregator returns an empty Aggregator.
func NewAggregator() *Aggregator {
	return &Aggregator{
		a: &Aggregate{},
		in: interner{
			frameIDs: make(map[Frame]int32),
			stackIDs: make(map[string]int32),
			fastIDs:  make(map[string]int32),
		},
		groupIDs: make(map[GroupKey]int32),
	}
}

// Add groups s; the Aggregator keeps nothing of s itself (its frames are
// copied, their strings and mappings shared).
func (g *Aggregator) Add(s *Sample) {
	a := g.a
	gk := GroupKey{
		PID: s.PID, Kind: s.Kind, Stack: g.in.stack(a, s), Link: s.Link,
		TID: s.TID, ThreadName: s.ThreadName, State: s.State, Reason: s.Reason,
		Attrs: s.Attrs,
	}
	id, ok := g.groupIDs[gk]
	if !ok {
		id = int32(len(a.Groups))
		a.Groups = append(a.Groups, Group{GroupKey: gk})
		g.groupIDs[gk] = id
	}
	grp := &a.Groups[id]
	grp.Times = append(grp.Times, unixNanos(s))
	grp.Values = append(grp.Values, s.Value)
	grp.Total += s.Value
	g.samples++
}

// Samples returns how many samples were added.
func (g *Aggregator) Samples() int { return g.samples }

// Finish returns the Aggregate of the samples added, in the order
// NewAggregate gives. The Aggregator must not be used after.
func (g *Aggregator) Finish() *Aggregate {
	a := g.a
	g.a, g.groupIDs = nil, nil
	a.sortGroups()
	return a
}

// sortGroups orders groups by PID and Kind, keeping first-appearance order
// within each; it sorts indices because Group is large to move.
func (a *Aggregate) sortGroups() {
	order := make([]int32, len(a.Groups))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(i, j int32) int {
		gi, gj := &a.Groups[i], &a.Groups[j]
		if c := cmp.Compare(gi.PID, gj.PID); c != 0 {
			return c
		}
		return cmp.Compare(gi.Kind, gj.Kind)
	})
	sorted := make([]Group, len(a.Groups))
	for i, o := range order {
		sorted[i] = a.Groups[o]
	}
	a.Groups = sorted
}

// interner assigns stack ids. Hashing every frame (two strings and a
// pointer) of every sample dominated the cost, so a stack is first looked
// up by its PID and raw addresses only and the hit is verified frame by
// frame; a miss or a failed check falls back to exact frame interning.
type interner struct {
	frameIDs map[Frame]int32
	stackIDs map[string]int32 // frame-id key -> stack id (exact)
	fastIDs  map[string]int32 // PID+addresses key -> stack id (hint)
	key      []byte
	ids      []int32
}

func (in *interner) stack(a *Aggregate, s *Sample) int32 {
	in.key = binary.LittleEndian.AppendUint32(in.key[:0], s.PID)
	for i := range s.Frames {
		in.key = binary.LittleEndian.AppendUint64(in.key, s.Frames[i].Address)
	}
	hint, ok := in.fastIDs[string(in.key)]
	if ok && sameFrames(a, a.Stacks[hint], s.Frames) {
		return hint
	}
	id := in.exact(a, s.Frames)
	if !ok {
		in.fastIDs[string(in.key)] = id
	}
	return id
}

func sameFrames(a *Aggregate, stack []int32, frames []Frame) bool {
	if len(stack) != len(frames) {
		return false
	}
	for i, id := range stack {
		if a.Frames[id] != frames[i] {
			return false
		}
	}
	return true
}

func (in *interner) exact(a *Aggregate, frames []Frame) int32 {
	in.ids = in.ids[:0]
	var key []byte
	for _, f := range frames {
		id, ok := in.frameIDs[f]
		if !ok {
			id = int32(len(a.Frames))
			a.Frames = append(a.Frames, f)
			in.frameIDs[f] = id
		}
		in.ids = append(in.ids, id)
		key = binary.LittleEndian.AppendUint32(key, uint32(id))
	}
	stack, ok := in.stackIDs[string(key)]
	if !ok {
		stack = int32(len(a.Stacks))
		a.Stacks = append(a.Stacks, slices.Clone(in.ids))
		in.stackIDs[string(key)] = stack
	}
	return stack
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
