// Package pprof writes a profile in the gzipped pprof format that
// `go tool pprof` reads, keeping the span and thread context as labels.
//
// Layout choices:
//   - One file holds both on-CPU and off-CPU data. Sample types are
//     samples/count and cpu/nanoseconds (count × period), plus
//     off_cpu/nanoseconds when the profile has off-CPU samples. An on-CPU
//     sample has 0 off_cpu and an off-CPU sample has 0 samples and cpu, so
//     `-sample_index=off_cpu` shows blocked time and the default (cpu)
//     shows CPU time, without a second file.
//   - Labels are strings (trace_id, span_id, thread.id, thread.name, pid,
//     process, and thread.state/off_cpu.reason for off-CPU), so every
//     label filters with one syntax. pprof reads an all-digit -tagfocus
//     value as a numeric range, which matches only numeric labels, so
//     anchor it to make it a regexp: `-tagfocus='thread.id=^1234$'`.
//     Hex ids with a letter need no anchors: `-tagfocus=span_id=00f0...`.
//   - One pprof sample per (stack, labels): events of different spans,
//     threads or wait states are never merged.
package pprof

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	gpprof "github.com/google/pprof/profile"

	"github.com/spanprof/spanprof/internal/profile"
)

// Label keys of every sample.
const (
	LabelTraceID      = "trace_id"
	LabelSpanID       = "span_id"
	LabelThreadID     = "thread.id"
	LabelThreadName   = "thread.name"
	LabelPID          = "pid"
	LabelProcess      = "process"
	LabelThreadState  = "thread.state"
	LabelOffCPUReason = "off_cpu.reason"
)

// Write writes p as a gzipped pprof profile (`.pb.gz`).
func Write(w io.Writer, p *profile.Profile) error {
	prof, err := Build(p)
	if err != nil {
		return err
	}
	if err := prof.Write(w); err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	return nil
}

// Build converts p into a pprof profile and checks that it is valid.
func Build(p *profile.Profile) (*gpprof.Profile, error) {
	agg := profile.NewAggregate(p)
	period := p.PeriodNanos()
	prof := &gpprof.Profile{
		SampleType: []*gpprof.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: "cpu", Unit: "nanoseconds"},
		},
		DefaultSampleType: "cpu",
		PeriodType:        &gpprof.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            period,
	}
	offCPU := p.HasKind(profile.OffCPU)
	if offCPU {
		prof.SampleType = append(prof.SampleType, &gpprof.ValueType{Type: "off_cpu", Unit: "nanoseconds"})
	}
	if !p.Start.IsZero() {
		prof.TimeNanos = p.Start.UnixNano()
		if d := p.End.Sub(p.Start); d > 0 {
			prof.DurationNanos = int64(d)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Lost)) {
		prof.Comments = append(prof.Comments, fmt.Sprintf("lost %s: %d", k, p.Lost[k]))
	}
	b := &builder{prof: prof, agg: agg, mappings: map[profile.Mapping]*gpprof.Mapping{},
		functions: map[[2]string]*gpprof.Function{}, locations: map[string]*gpprof.Location{},
		stacks: map[int32][]*gpprof.Location{}, kernel: map[*gpprof.Mapping]bool{}}
	for i := range agg.Groups {
		g := &agg.Groups[i]
		s := &gpprof.Sample{Location: b.stack(g.Stack), Label: labels(p, g)}
		switch {
		case g.Kind == profile.OffCPU:
			s.Value = []int64{0, 0, g.Total}
		case offCPU:
			s.Value = []int64{g.Total, g.Total * period, 0}
		default:
			s.Value = []int64{g.Total, g.Total * period}
		}
		prof.Sample = append(prof.Sample, s)
	}
	b.finishMappings()
	if err := prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return prof, nil
}

func labels(p *profile.Profile, g *profile.Group) map[string][]string {
	l := map[string][]string{
		LabelThreadID: {strconv.FormatUint(uint64(g.TID), 10)},
		LabelPID:      {strconv.FormatUint(uint64(g.PID), 10)},
		LabelProcess:  {p.ProcessName(g.PID)},
	}
	if g.ThreadName != "" {
		l[LabelThreadName] = []string{g.ThreadName}
	}
	if !g.Link.IsZero() {
		l[LabelTraceID] = []string{g.Link.TraceIDHex()}
		l[LabelSpanID] = []string{g.Link.SpanIDHex()}
	}
	if g.State != "" {
		l[LabelThreadState] = []string{g.State}
	}
	if g.Reason != "" {
		l[LabelOffCPUReason] = []string{g.Reason}
	}
	for _, a := range g.Attrs.All() {
		l[a.Key] = []string{a.Value}
	}
	return l
}

// builder deduplicates mappings, functions and locations by value, giving
// each the dense 1-based IDs pprof requires.
type builder struct {
	prof      *gpprof.Profile
	agg       *profile.Aggregate
	mappings  map[profile.Mapping]*gpprof.Mapping
	functions map[[2]string]*gpprof.Function
	locations map[string]*gpprof.Location
	stacks    map[int32][]*gpprof.Location
	// unsymbolized marks mappings with at least one frame lacking a name.
	unsymbolized map[*gpprof.Mapping]bool
	kernel       map[*gpprof.Mapping]bool
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func (b *builder) stack(id int32) []*gpprof.Location {
	if locs, ok := b.stacks[id]; ok {
		return locs
	}
	var locs []*gpprof.Location
	for _, run := range b.agg.Locations(b.agg.Stacks[id]) {
		locs = append(locs, b.location(run))
	}
	b.stacks[id] = locs
	return locs
}

func (b *builder) location(run []int32) *gpprof.Location {
	key := fmt.Sprint(run)
	if loc, ok := b.locations[key]; ok {
		return loc
	}
	phys := b.agg.Frames[run[len(run)-1]]
	loc := &gpprof.Location{ID: uint64(len(b.prof.Location) + 1), Address: phys.Address, Mapping: b.mapping(phys)}
	for _, id := range run {
		f := b.agg.Frames[id]
		if (f.Function == "" || f.NoSymbol) && loc.Mapping != nil {
			// A function named by its start only is no symbol: pprof
			// may still find one.
			b.markUnsymbolized(loc.Mapping)
		}
		if f.Function == "" {
			continue
		}
		loc.Line = append(loc.Line, gpprof.Line{Function: b.function(f), Line: int64(f.Line)})
	}
	b.prof.Location = append(b.prof.Location, loc)
	b.locations[key] = loc
	return loc
}

func (b *builder) markUnsymbolized(m *gpprof.Mapping) {
	if b.unsymbolized == nil {
		b.unsymbolized = map[*gpprof.Mapping]bool{}
	}
	b.unsymbolized[m] = true
}

func (b *builder) mapping(f profile.Frame) *gpprof.Mapping {
	m, ok := profile.ExportMapping(f)
	if !ok {
		return nil
	}
	if pm, ok := b.mappings[m]; ok {
		return pm
	}
	// pprof uses BuildID to look up symbols; an HTL hash is not one, so it
	// is left out rather than misleading symbolizers.
	pm := &gpprof.Mapping{ID: uint64(len(b.prof.Mapping) + 1), Start: m.Start, Limit: m.Limit,
		Offset: m.Offset, File: m.Path, BuildID: m.BuildID}
	b.prof.Mapping = append(b.prof.Mapping, pm)
	b.mappings[m] = pm
	if m.Kernel {
		b.kernel[pm] = true
	}
	return pm
}

// finishMappings moves kernel mappings last, because pprof presents the
// first mapping as the profiled binary, and marks mappings whose frames
// are all symbolized, so pprof does not try to symbolize them again from
// local files.
func (b *builder) finishMappings() {
	slices.SortStableFunc(b.prof.Mapping, func(x, y *gpprof.Mapping) int {
		return cmp.Compare(b2i(b.kernel[x]), b2i(b.kernel[y]))
	})
	for i, m := range b.prof.Mapping {
		m.ID = uint64(i + 1)
		if !b.unsymbolized[m] {
			m.HasFunctions, m.HasFilenames, m.HasLineNumbers = true, true, true
		}
	}
}

func (b *builder) function(f profile.Frame) *gpprof.Function {
	k := [2]string{f.Function, f.File}
	if fn, ok := b.functions[k]; ok {
		return fn
	}
	fn := &gpprof.Function{ID: uint64(len(b.prof.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
	b.prof.Function = append(b.prof.Function, fn)
	b.functions[k] = fn
	return fn
}
