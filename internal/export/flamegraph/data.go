// Package flamegraph writes the self-contained HTML viewer: a flame graph
// with on-CPU/off-CPU views, a per-thread span timeline and filters by
// trace, span, thread, process and time. The profile travels inside the
// page as compact JSON and the viewer's JS and CSS are inlined, so the
// page needs no network when it is opened. `spanprof serve` serves the
// same page.
package flamegraph

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// DataVersion is the version of the JSON form; the viewer refuses others.
const DataVersion = 1

// Data is the profile in the form the viewer reads. Every table is
// indexed from 0; strings are shared through Strings. Samples are
// columns (one entry per event, sorted by time) because 100k-event
// profiles parse and filter much faster as flat number arrays than as
// objects.
type Data struct {
	Version int `json:"version"`
	// StartUnixNano is t0 as a decimal string (JS numbers lose
	// nanoseconds); Time offsets are microseconds after it.
	StartUnixNano string `json:"startUnixNano"`
	// EndMicros is the end of the recording after t0.
	EndMicros int64 `json:"endMicros"`
	// PeriodNanos is the on-CPU sampling period; 0 when unknown.
	PeriodNanos int64    `json:"periodNanos"`
	Strings     []string `json:"strings"`
	// Frames holds [name, module] string indices per distinct frame.
	Frames [][2]int32 `json:"frames"`
	// Stacks holds frame indices per stack, root first.
	Stacks [][]int32 `json:"stacks"`
	// Processes holds [pid, name, service] (names as string indices).
	Processes [][3]int64 `json:"processes"`
	// Threads holds [process index, tid, name string index].
	Threads [][3]int64 `json:"threads"`
	// Links holds [trace_id, span_id] in lowercase hex; entry 0 is the
	// empty link of samples outside any span.
	Links   [][2]string       `json:"links"`
	Samples Columns           `json:"samples"`
	Lost    map[string]uint64 `json:"lost,omitempty"`
}

// Columns holds one entry per event in each slice.
type Columns struct {
	// Kind is 0 for on-CPU and 1 for off-CPU.
	Kind   []int8  `json:"kind"`
	Thread []int32 `json:"thread"`
	Stack  []int32 `json:"stack"`
	Link   []int32 `json:"link"`
	// Time is microseconds after t0, -1 when the event has no time (pprof
	// input). An off-CPU event's time is when the thread ran again; it
	// was blocked for Value nanoseconds before that.
	Time []int64 `json:"time"`
	// Value is 1 (or a count) per on-CPU event, nanoseconds off-CPU.
	Value []int64 `json:"value"`
}

// NewData converts p into the viewer's form.
func NewData(p *profile.Profile) *Data {
	agg := profile.NewAggregate(p)
	b := dataBuilder{
		d:       &Data{Version: DataVersion, PeriodNanos: p.PeriodNanos(), Strings: []string{""}, Links: [][2]string{{"", ""}}},
		strs:    map[string]int32{"": 0},
		frames:  map[[2]int32]int32{},
		procs:   map[uint32]int32{},
		threads: map[threadKey]int32{},
		links:   map[profile.Link]int32{{}: 0},
	}
	t0 := startTime(p, agg)
	b.d.StartUnixNano = fmt.Sprint(t0.UnixNano())
	if !p.End.IsZero() && p.End.After(t0) {
		b.d.EndMicros = int64(p.End.Sub(t0) / time.Microsecond)
	}
	for _, pid := range agg.PIDs() {
		b.process(p, pid)
	}
	stacks := make([]int32, len(agg.Stacks))
	for i, st := range agg.Stacks {
		stacks[i] = b.stack(agg, st)
	}
	type event struct {
		kind                  int8
		thread, stack, link   int32
		time, value, sequence int64
	}
	var events []event
	for gi := range agg.Groups {
		g := &agg.Groups[gi]
		th := b.thread(g.PID, g.TID, g.ThreadName)
		link := b.link(g.Link)
		for j, ns := range g.Times {
			t := int64(-1)
			if ns != 0 {
				t = (int64(ns) - t0.UnixNano()) / int64(time.Microsecond)
			}
			events = append(events, event{int8(g.Kind), th, stacks[g.Stack], link, t, g.Values[j], int64(len(events))})
		}
	}
	slices.SortFunc(events, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.sequence, b.sequence))
	})
	c := &b.d.Samples
	for _, e := range events {
		c.Kind = append(c.Kind, e.kind)
		c.Thread = append(c.Thread, e.thread)
		c.Stack = append(c.Stack, e.stack)
		c.Link = append(c.Link, e.link)
		c.Time = append(c.Time, e.time)
		c.Value = append(c.Value, e.value)
		b.d.EndMicros = max(b.d.EndMicros, e.time)
	}
	if len(p.Lost) > 0 {
		b.d.Lost = maps.Clone(p.Lost)
	}
	return b.d
}

// Encode returns the JSON form of d. encoding/json escapes '<', '>' and
// '&', so the result can sit inside a <script> element as it is.
func (d *Data) Encode() ([]byte, error) {
	buf, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode viewer data: %w", err)
	}
	return buf, nil
}

// startTime is the earliest of the profile start and every event time, so
// that every time offset is non-negative and -1 can mean "no time".
func startTime(p *profile.Profile, agg *profile.Aggregate) time.Time {
	t0 := p.Start
	for gi := range agg.Groups {
		for _, ns := range agg.Groups[gi].Times {
			if ns == 0 {
				continue
			}
			if t := time.Unix(0, int64(ns)); t0.IsZero() || t.Before(t0) {
				t0 = t
			}
		}
	}
	if t0.IsZero() {
		t0 = time.Unix(0, 0)
	}
	return t0
}

type threadKey struct {
	pid, tid uint32
	name     string
}

type dataBuilder struct {
	d       *Data
	strs    map[string]int32
	frames  map[[2]int32]int32
	procs   map[uint32]int32
	threads map[threadKey]int32
	links   map[profile.Link]int32
}

func (b *dataBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(len(b.d.Strings))
	b.d.Strings = append(b.d.Strings, s)
	b.strs[s] = i
	return i
}

func (b *dataBuilder) process(p *profile.Profile, pid uint32) int32 {
	if i, ok := b.procs[pid]; ok {
		return i
	}
	var service string
	if pr := p.Processes[pid]; pr != nil {
		service = pr.ServiceName
	}
	i := int32(len(b.d.Processes))
	b.d.Processes = append(b.d.Processes, [3]int64{int64(pid), int64(b.str(p.ProcessName(pid))), int64(b.str(service))})
	b.procs[pid] = i
	return i
}

func (b *dataBuilder) thread(pid, tid uint32, name string) int32 {
	k := threadKey{pid, tid, name}
	if i, ok := b.threads[k]; ok {
		return i
	}
	i := int32(len(b.d.Threads))
	b.d.Threads = append(b.d.Threads, [3]int64{int64(b.procs[pid]), int64(tid), int64(b.str(name))})
	b.threads[k] = i
	return i
}

func (b *dataBuilder) link(l profile.Link) int32 {
	if i, ok := b.links[l]; ok {
		return i
	}
	i := int32(len(b.d.Links))
	b.d.Links = append(b.d.Links, [2]string{l.TraceIDHex(), l.SpanIDHex()})
	b.links[l] = i
	return i
}

// stack converts a leaf-first aggregate stack into root-first viewer
// frames. Frames merge by display name and module: a flame graph shows
// functions, not lines.
func (b *dataBuilder) stack(agg *profile.Aggregate, st []int32) int32 {
	out := make([]int32, len(st))
	for i, id := range st {
		f := agg.Frames[id]
		var module string
		if m, ok := profile.ExportMapping(f); ok {
			module = m.Path
			if !m.Kernel {
				module = filepath.Base(m.Path)
			}
		}
		k := [2]int32{b.str(f.DisplayName()), b.str(module)}
		fi, ok := b.frames[k]
		if !ok {
			fi = int32(len(b.d.Frames))
			b.d.Frames = append(b.d.Frames, k)
			b.frames[k] = fi
		}
		out[len(st)-1-i] = fi
	}
	b.d.Stacks = append(b.d.Stacks, out)
	return int32(len(b.d.Stacks) - 1)
}
