// Package otlp turns a profile into OpenTelemetry profiles
// (v1development, through collector pdata) and writes them as OTLP/JSON or
// protobuf files. The agent reuses Build for its network exporter.
package otlp

import (
	"crypto/rand"
	"encoding/binary"
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/profile"
)

// Attribute keys spanprof emits, from the OpenTelemetry semantic
// conventions where one exists.
const (
	AttrProcessPID     = "process.pid"
	AttrExecutableName = "process.executable.name"
	AttrExecutablePath = "process.executable.path"
	AttrServiceName    = "service.name"
	AttrContainerID    = "container.id"
	AttrThreadID       = "thread.id"
	AttrThreadName     = "thread.name"
	AttrThreadState    = "thread.state"
	AttrOffCPUReason   = "off_cpu.reason"
	AttrBuildIDGNU     = "process.executable.build_id.gnu"
	AttrBuildIDHTLHash = "process.executable.build_id.htlhash"
	// ScopeName is the instrumentation scope of every ScopeProfiles.
	ScopeName = "spanprof"
)

const (
	sampleTypeOnCPU  = "samples"
	sampleUnitOnCPU  = "count"
	sampleTypeOffCPU = "off_cpu"
	unitNanoseconds  = "nanoseconds"
	periodTypeCPU    = "cpu"
)

// Build converts p into pprofile.Profiles: one ResourceProfiles per
// process (in PID order) holding an on-CPU Profile and, when the process
// has off-CPU samples, an off-CPU Profile. All share one dictionary whose
// tables start with the zero entry the protocol requires at index 0.
//
// Marshalling pdata mutates it (resource attribute strings move into the
// string table), so build a fresh value for every marshal.
func Build(p *profile.Profile) pprofile.Profiles {
	return BuildAggregate(p, profile.NewAggregate(p))
}

// BuildAggregate is Build for a caller that already aggregated p.
func BuildAggregate(p *profile.Profile, agg *profile.Aggregate) pprofile.Profiles {
	out := pprofile.NewProfiles()
	b := newBuilder(out.Dictionary(), agg)
	groups := agg.Groups
	for len(groups) > 0 {
		pid := groups[0].PID
		n := 0
		for n < len(groups) && groups[n].PID == pid {
			n++
		}
		rp := out.ResourceProfiles().AppendEmpty()
		setResource(rp.Resource().Attributes(), pid, p.Processes[pid])
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(ScopeName)
		b.addProfiles(sp.Profiles(), p, groups[:n])
		groups = groups[n:]
	}
	return out
}

func setResource(attrs pcommon.Map, pid uint32, pr *profile.Process) {
	attrs.PutInt(AttrProcessPID, int64(pid))
	if pr == nil {
		return
	}
	putNonEmpty := func(k, v string) {
		if v != "" {
			attrs.PutStr(k, v)
		}
	}
	putNonEmpty(AttrExecutableName, pr.ExeName)
	putNonEmpty(AttrExecutablePath, pr.ExePath)
	putNonEmpty(AttrServiceName, pr.ServiceName)
	putNonEmpty(AttrContainerID, pr.ContainerID)
	keys := make([]string, 0, len(pr.Attributes))
	for k := range pr.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// The named fields above are authoritative.
		if _, set := attrs.Get(k); !set {
			attrs.PutStr(k, pr.Attributes[k])
		}
	}
}

// addProfiles appends the on-CPU and off-CPU profiles of one process;
// groups are that process's groups, on-CPU first (Aggregate order).
func (b *builder) addProfiles(dst pprofile.ProfilesSlice, p *profile.Profile, groups []profile.Group) {
	split := sort.Search(len(groups), func(i int) bool { return groups[i].Kind != profile.OnCPU })
	if split > 0 {
		prof := b.newProfile(dst, p, groups[:split], sampleTypeOnCPU, sampleUnitOnCPU)
		prof.PeriodType().SetTypeStrindex(b.str(periodTypeCPU))
		prof.PeriodType().SetUnitStrindex(b.str(unitNanoseconds))
		prof.SetPeriod(p.PeriodNanos())
		b.addSamples(prof, groups[:split], false)
	}
	if split < len(groups) {
		prof := b.newProfile(dst, p, groups[split:], sampleTypeOffCPU, unitNanoseconds)
		b.addSamples(prof, groups[split:], true)
	}
}

func (b *builder) newProfile(dst pprofile.ProfilesSlice, p *profile.Profile, groups []profile.Group, typ, unit string) pprofile.Profile {
	prof := dst.AppendEmpty()
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand never fails on Linux
	prof.SetProfileID(pprofile.ProfileID(id))
	prof.SampleType().SetTypeStrindex(b.str(typ))
	prof.SampleType().SetUnitStrindex(b.str(unit))
	if start, end, ok := timeRange(p, groups); ok {
		prof.SetTime(pcommon.Timestamp(start))
		prof.SetDurationNano(end - start)
	}
	return prof
}

// timeRange is the profile's [start, end) in Unix nanoseconds: the
// collection window, widened to hold every sample's timestamp, as the
// protocol requires. Samples do fall outside the window: records the
// kernel wrote before the programs were detached are read after the
// window closed, an agent interval receives records stamped before it
// began (ring-buffer latency), and the boot-time offset is re-synced.
func timeRange(p *profile.Profile, groups []profile.Group) (start, end uint64, ok bool) {
	if !p.Start.IsZero() {
		start, end, ok = uint64(p.Start.UnixNano()), uint64(p.Start.UnixNano()), true
		if p.End.After(p.Start) {
			end = uint64(p.End.UnixNano())
		}
	}
	for i := range groups {
		for _, t := range groups[i].Times {
			if t == 0 {
				continue // no time; nothing to cover
			}
			if !ok {
				start, end, ok = t, t+1, true
			}
			start = min(start, t)
			end = max(end, t+1) // the range is half-open
		}
	}
	return start, end, ok
}

func (b *builder) addSamples(prof pprofile.Profile, groups []profile.Group, offCPU bool) {
	samples := prof.Samples()
	samples.EnsureCapacity(len(groups))
	for i := range groups {
		g := &groups[i]
		s := samples.AppendEmpty()
		s.SetStackIndex(b.stack(g.Stack))
		s.SetLinkIndex(b.link(g.Link))
		s.Values().FromRaw(g.Values)
		s.TimestampsUnixNano().FromRaw(g.Times)
		attrs := s.AttributeIndices()
		attrs.Append(b.intAttr(AttrThreadID, int64(g.TID)))
		if g.ThreadName != "" {
			attrs.Append(b.strAttr(AttrThreadName, g.ThreadName))
		}
		if offCPU {
			if g.State != "" {
				attrs.Append(b.strAttr(AttrThreadState, g.State))
			}
			if g.Reason != "" {
				attrs.Append(b.strAttr(AttrOffCPUReason, g.Reason))
			}
		}
		for _, a := range g.Attrs.All() {
			attrs.Append(b.strAttr(a.Key, a.Value))
		}
	}
}

// builder fills the shared dictionary, deduplicating every table with a
// map so building stays linear in the number of distinct entries (the
// pprofile.Set* helpers search linearly).
type builder struct {
	dict      pprofile.ProfilesDictionary
	agg       *profile.Aggregate
	strings   map[string]int32
	attrs     map[attrKey]int32
	links     map[profile.Link]int32
	mappings  map[profile.Mapping]int32
	functions map[funcKey]int32
	locations map[string]int32 // frame ids -> location_table index
	// locContent maps a location's exported content to its index.
	locContent map[string]int32
	stacks     map[int32]int32 // aggregate stack id -> stack_table index
	// stackContent maps a stack's location indices to its index.
	stackContent map[string]int32
}

type attrKey struct {
	key   string
	str   string
	num   int64
	isNum bool
}

type funcKey struct{ name, file string }

func newBuilder(dict pprofile.ProfilesDictionary, agg *profile.Aggregate) *builder {
	b := &builder{
		dict:         dict,
		agg:          agg,
		strings:      map[string]int32{"": 0},
		attrs:        map[attrKey]int32{},
		links:        map[profile.Link]int32{{}: 0},
		mappings:     map[profile.Mapping]int32{},
		functions:    map[funcKey]int32{},
		locations:    map[string]int32{},
		locContent:   map[string]int32{},
		stacks:       map[int32]int32{},
		stackContent: map[string]int32{},
	}
	// Index 0 of every table is the zero value ("no mapping", "no link"...).
	dict.StringTable().Append("")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	return b
}

func (b *builder) str(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strings[s] = i
	return i
}

func (b *builder) strAttr(k, v string) int32 {
	return b.attr(attrKey{key: k, str: v})
}

func (b *builder) intAttr(k string, v int64) int32 {
	return b.attr(attrKey{key: k, num: v, isNum: true})
}

func (b *builder) attr(k attrKey) int32 {
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(b.str(k.key))
	if k.isNum {
		kv.Value().SetInt(k.num)
	} else {
		kv.Value().SetStr(k.str)
	}
	b.attrs[k] = i
	return i
}

func (b *builder) link(l profile.Link) int32 {
	if i, ok := b.links[l]; ok {
		return i
	}
	i := int32(b.dict.LinkTable().Len())
	dl := b.dict.LinkTable().AppendEmpty()
	dl.SetTraceID(pcommon.TraceID(l.TraceID))
	dl.SetSpanID(pcommon.SpanID(l.SpanID))
	b.links[l] = i
	return i
}

func (b *builder) mapping(f profile.Frame) int32 {
	m, ok := profile.ExportMapping(f)
	if !ok {
		return 0
	}
	// Key by what is exported, so mappings differing in nothing else
	// share one entry.
	m.Kernel = false
	if m.BuildID != "" {
		m.HTLHash = ""
	}
	if i, ok := b.mappings[m]; ok {
		return i
	}
	i := int32(b.dict.MappingTable().Len())
	dm := b.dict.MappingTable().AppendEmpty()
	dm.SetMemoryStart(m.Start)
	dm.SetMemoryLimit(m.Limit)
	dm.SetFileOffset(m.Offset)
	dm.SetFilenameStrindex(b.str(m.Path))
	switch {
	case m.BuildID != "":
		dm.AttributeIndices().Append(b.strAttr(AttrBuildIDGNU, m.BuildID))
	case m.HTLHash != "":
		dm.AttributeIndices().Append(b.strAttr(AttrBuildIDHTLHash, m.HTLHash))
	}
	b.mappings[m] = i
	return i
}

func (b *builder) function(f profile.Frame) int32 {
	k := funcKey{f.Function, f.File}
	if i, ok := b.functions[k]; ok {
		return i
	}
	i := int32(b.dict.FunctionTable().Len())
	fn := b.dict.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.str(f.Function))
	fn.SetSystemNameStrindex(b.str(f.Function))
	fn.SetFilenameStrindex(b.str(f.File))
	b.functions[k] = i
	return i
}

// location returns the location of a run of frame ids: one machine frame
// plus the frames inlined into it. Unsymbolized frames keep only their
// address and mapping, for symbolization out of band by build ID.
func (b *builder) location(run []int32) int32 {
	key := make([]byte, 0, 4*len(run))
	for _, id := range run {
		key = binary.LittleEndian.AppendUint32(key, uint32(id))
	}
	if i, ok := b.locations[string(key)]; ok {
		return i
	}
	phys := b.agg.Frames[run[len(run)-1]]
	// Distinct frames can export alike (they differ in what OTLP does not
	// carry), so the location is looked up by what it holds too, or the
	// table would hold duplicates.
	mi := b.mapping(phys)
	content := binary.LittleEndian.AppendUint64(nil, phys.Address)
	content = binary.LittleEndian.AppendUint32(content, uint32(mi))
	type line struct {
		fn   int32
		line int64
	}
	var lines []line
	for _, id := range run {
		f := b.agg.Frames[id]
		if f.Function == "" {
			continue
		}
		// OTLP lines are non-negative, 0 meaning unknown; Go's line
		// table says -1 for functions it has no line for (assembly).
		l := line{b.function(f), int64(max(f.Line, 0))}
		lines = append(lines, l)
		content = binary.LittleEndian.AppendUint32(content, uint32(l.fn))
		content = binary.LittleEndian.AppendUint64(content, uint64(l.line))
	}
	if i, ok := b.locContent[string(content)]; ok {
		b.locations[string(key)] = i
		return i
	}
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetAddress(phys.Address)
	loc.SetMappingIndex(mi)
	for _, l := range lines {
		ln := loc.Lines().AppendEmpty()
		ln.SetFunctionIndex(l.fn)
		ln.SetLine(l.line)
	}
	b.locations[string(key)] = i
	b.locContent[string(content)] = i
	return i
}

func (b *builder) stack(id int32) int32 {
	if i, ok := b.stacks[id]; ok {
		return i
	}
	// Stacks of distinct frames can share their locations (see location).
	var locs []int32
	var content []byte
	for _, run := range b.agg.Locations(b.agg.Stacks[id]) {
		li := b.location(run)
		locs = append(locs, li)
		content = binary.LittleEndian.AppendUint32(content, uint32(li))
	}
	if i, ok := b.stackContent[string(content)]; ok {
		b.stacks[id] = i
		return i
	}
	i := int32(b.dict.StackTable().Len())
	b.dict.StackTable().AppendEmpty().LocationIndices().FromRaw(locs)
	b.stacks[id] = i
	b.stackContent[string(content)] = i
	return i
}
