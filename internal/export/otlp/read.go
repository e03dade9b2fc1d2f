package otlp

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/profile"
)

// ErrNoProfiles is returned by the readers for input that decodes but
// holds no profile at all.
var ErrNoProfiles = errors.New("no profiles in input")

// ReadJSON decodes an OTLP/JSON ExportProfilesServiceRequest (a
// `.otlp.json` file) back into a profile.
func ReadJSON(r io.Reader) (*profile.Profile, error) {
	var u pprofile.JSONUnmarshaler
	return read(r, "json", u.UnmarshalProfiles)
}

// ReadProto decodes an OTLP protobuf ExportProfilesServiceRequest (a
// `.otlp.pb` file) back into a profile.
func ReadProto(r io.Reader) (*profile.Profile, error) {
	var u pprofile.ProtoUnmarshaler
	return read(r, "protobuf", u.UnmarshalProfiles)
}

func read(r io.Reader, format string, unmarshal func([]byte) (pprofile.Profiles, error)) (*profile.Profile, error) {
	buf, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read otlp %s: %w", format, err)
	}
	pd, err := unmarshal(buf)
	if err != nil {
		return nil, fmt.Errorf("decode otlp %s: %w", format, err)
	}
	return FromProfiles(pd)
}

// FromProfiles converts OTLP profiles into the profile model: one Sample
// per (timestamp, value) event, so a round trip through Build gives the
// events back. Locations become frames leaf first, with every line but
// the last of a location marked Inlined. A sample without timestamps
// becomes one event with a zero Time per value.
func FromProfiles(pd pprofile.Profiles) (*profile.Profile, error) {
	if pd.ResourceProfiles().Len() == 0 {
		return nil, ErrNoProfiles
	}
	d := reader{dict: pd.Dictionary(), mappings: map[int32]*profile.Mapping{}, stacks: map[int32][]profile.Frame{}}
	out := &profile.Profile{Processes: map[uint32]*profile.Process{}, Samples: make([]profile.Sample, 0, countEvents(pd))}
	for _, rp := range pd.ResourceProfiles().All() {
		pid, proc := readResource(rp.Resource().Attributes())
		if proc != nil {
			out.Processes[pid] = proc
		}
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				if err := d.addProfile(out, pid, prof); err != nil {
					return nil, err
				}
			}
		}
	}
	sortByTime(out.Samples)
	return out, nil
}

// countEvents is the number of events FromProfiles makes of pd, so that
// its samples are allocated once.
func countEvents(pd pprofile.Profiles) int {
	n := 0
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				for _, s := range prof.Samples().All() {
					n += max(s.TimestampsUnixNano().Len(), s.Values().Len())
				}
			}
		}
	}
	return n
}

// sortByTime sorts samples by time, stably, as slices.SortStableFunc
// would: it sorts small keys and then moves each sample once, where a
// stable sort of the samples themselves (150 bytes each, pointers in
// them) spent more than the decoding.
func sortByTime(samples []profile.Sample) {
	cmp := func(a, b profile.Sample) int { return a.Time.Compare(b.Time) }
	if slices.IsSortedFunc(samples, cmp) {
		return
	}
	type key struct {
		sec  int64
		nsec int32
		i    int32
	}
	keys := make([]key, len(samples))
	for i := range samples {
		t := samples[i].Time
		keys[i] = key{t.Unix(), int32(t.Nanosecond()), int32(i)}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.sec != b.sec {
			return cmpInt(a.sec, b.sec)
		}
		if a.nsec != b.nsec {
			return cmpInt(a.nsec, b.nsec)
		}
		return cmpInt(a.i, b.i)
	})
	// Position k takes samples[keys[k].i]: follow each cycle of the
	// permutation, marking the positions done with i = -1.
	for k := range keys {
		if keys[k].i < 0 || int(keys[k].i) == k {
			continue
		}
		tmp := samples[k]
		j := k
		for {
			src := int(keys[j].i)
			keys[j].i = -1
			if src == k {
				samples[j] = tmp
				break
			}
			samples[j] = samples[src]
			j = src
		}
	}
}

func cmpInt[T int32 | int64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func readResource(attrs pcommon.Map) (uint32, *profile.Process) {
	v, ok := attrs.Get(AttrProcessPID)
	if !ok {
		return 0, nil
	}
	pid := uint32(v.Int())
	if v.Type() == pcommon.ValueTypeStr {
		n, _ := strconv.ParseUint(v.Str(), 10, 32)
		pid = uint32(n)
	}
	pr := &profile.Process{PID: pid}
	for k, v := range attrs.All() {
		switch k {
		case AttrProcessPID:
		case AttrExecutableName:
			pr.ExeName = v.AsString()
		case AttrExecutablePath:
			pr.ExePath = v.AsString()
		case AttrServiceName:
			pr.ServiceName = v.AsString()
		case AttrContainerID:
			pr.ContainerID = v.AsString()
		default:
			if pr.Attributes == nil {
				pr.Attributes = map[string]string{}
			}
			pr.Attributes[k] = v.AsString()
		}
	}
	return pid, pr
}

// reader resolves dictionary indices, sharing one *Mapping per mapping
// index and one frame slice per stack index.
type reader struct {
	dict     pprofile.ProfilesDictionary
	mappings map[int32]*profile.Mapping
	stacks   map[int32][]profile.Frame
}

func (d *reader) str(i int32) string {
	if i <= 0 || int(i) >= d.dict.StringTable().Len() {
		return ""
	}
	return d.dict.StringTable().At(int(i))
}

func (d *reader) addProfile(out *profile.Profile, pid uint32, prof pprofile.Profile) error {
	kind := profile.OnCPU
	if d.str(prof.SampleType().TypeStrindex()) == sampleTypeOffCPU {
		kind = profile.OffCPU
	}
	if p := prof.Period(); kind == profile.OnCPU && p > 0 && out.Frequency == 0 {
		out.Frequency = int(int64(time.Second) / p)
	}
	if t := prof.Time().AsTime(); prof.Time() != 0 {
		if out.Start.IsZero() || t.Before(out.Start) {
			out.Start = t
		}
		if end := t.Add(time.Duration(prof.DurationNano())); end.After(out.End) {
			out.End = end
		}
	}
	for i, s := range prof.Samples().All() {
		frames, err := d.stack(s.StackIndex())
		if err != nil {
			return fmt.Errorf("decode sample %d of pid %d: %w", i, pid, err)
		}
		base := profile.Sample{Kind: kind, PID: pid, Frames: frames}
		if li := s.LinkIndex(); li > 0 {
			if int(li) >= d.dict.LinkTable().Len() {
				return fmt.Errorf("decode sample %d of pid %d: link index %d out of range", i, pid, li)
			}
			l := d.dict.LinkTable().At(int(li))
			base.Link = profile.Link{TraceID: [16]byte(l.TraceID()), SpanID: [8]byte(l.SpanID())}
		}
		d.sampleAttrs(&base, s.AttributeIndices())
		d.appendEvents(out, base, s)
	}
	return nil
}

func (d *reader) sampleAttrs(s *profile.Sample, idx pcommon.Int32Slice) {
	var ctx []profile.Attr // the rest: the thread context's
	defer func() {
		slices.SortStableFunc(ctx, func(a, b profile.Attr) int { return strings.Compare(a.Key, b.Key) })
		ctx = slices.CompactFunc(ctx, func(a, b profile.Attr) bool { return a.Key == b.Key })
		s.Attrs = profile.MakeAttrs(ctx)
	}()
	for _, ai := range idx.All() {
		if ai <= 0 || int(ai) >= d.dict.AttributeTable().Len() {
			continue
		}
		kv := d.dict.AttributeTable().At(int(ai))
		v := kv.Value()
		switch d.str(kv.KeyStrindex()) {
		case AttrThreadID:
			if n, err := strconv.ParseUint(v.AsString(), 10, 32); err == nil {
				s.TID = uint32(n)
			}
		case AttrThreadName:
			s.ThreadName = v.AsString()
		case AttrThreadState:
			s.State = v.AsString()
		case AttrOffCPUReason:
			s.Reason = v.AsString()
		default:
			ctx = append(ctx, profile.Attr{Key: d.str(kv.KeyStrindex()), Value: v.AsString()})
		}
	}
}

// appendEvents splits one OTLP sample into its events. Values and
// timestamps are parallel when both are present; a lone timestamp list
// counts one event each, a lone value list has no times.
func (d *reader) appendEvents(out *profile.Profile, base profile.Sample, s pprofile.Sample) {
	times, values := s.TimestampsUnixNano(), s.Values()
	n := max(times.Len(), values.Len())
	for j := range n {
		ev := base
		ev.Value = 1
		if j < values.Len() {
			ev.Value = values.At(j)
		}
		if j < times.Len() && times.At(j) != 0 {
			ev.Time = time.Unix(0, int64(times.At(j))).UTC()
		}
		out.Samples = append(out.Samples, ev)
	}
}

func (d *reader) stack(si int32) ([]profile.Frame, error) {
	if frames, ok := d.stacks[si]; ok {
		return frames, nil
	}
	if si < 0 || int(si) >= d.dict.StackTable().Len() {
		return nil, fmt.Errorf("stack index %d out of range", si)
	}
	locs := d.dict.StackTable().At(int(si)).LocationIndices()
	n := 0
	for _, li := range locs.All() {
		if li < 0 || int(li) >= d.dict.LocationTable().Len() {
			return nil, fmt.Errorf("location index %d out of range", li)
		}
		n += max(1, d.dict.LocationTable().At(int(li)).Lines().Len())
	}
	var frames []profile.Frame
	if n > 0 {
		frames = make([]profile.Frame, 0, n)
	}
	for _, li := range locs.All() {
		loc := d.dict.LocationTable().At(int(li))
		m := d.mapping(loc.MappingIndex())
		lines := loc.Lines()
		if lines.Len() == 0 {
			frames = append(frames, profile.Frame{Address: loc.Address(), Mapping: m})
			continue
		}
		for k, ln := range lines.All() {
			f := profile.Frame{Address: loc.Address(), Line: int(ln.Line()), Mapping: m, Inlined: k < lines.Len()-1}
			if fi := ln.FunctionIndex(); fi > 0 && int(fi) < d.dict.FunctionTable().Len() {
				fn := d.dict.FunctionTable().At(int(fi))
				f.Function = d.str(fn.NameStrindex())
				f.File = d.str(fn.FilenameStrindex())
			}
			frames = append(frames, f)
		}
	}
	d.stacks[si] = frames
	return frames, nil
}

func (d *reader) mapping(mi int32) *profile.Mapping {
	if mi <= 0 || int(mi) >= d.dict.MappingTable().Len() {
		return nil
	}
	if m, ok := d.mappings[mi]; ok {
		return m
	}
	dm := d.dict.MappingTable().At(int(mi))
	m := &profile.Mapping{Start: dm.MemoryStart(), Limit: dm.MemoryLimit(), Offset: dm.FileOffset(),
		Path: d.str(dm.FilenameStrindex())}
	m.Kernel = m.Path == profile.KernelMappingPath || strings.HasPrefix(m.Path, "[kernel")
	for _, ai := range dm.AttributeIndices().All() {
		if ai <= 0 || int(ai) >= d.dict.AttributeTable().Len() {
			continue
		}
		kv := d.dict.AttributeTable().At(int(ai))
		switch d.str(kv.KeyStrindex()) {
		case AttrBuildIDGNU:
			m.BuildID = kv.Value().AsString()
		case AttrBuildIDHTLHash:
			m.HTLHash = kv.Value().AsString()
		}
	}
	d.mappings[mi] = m
	return m
}
