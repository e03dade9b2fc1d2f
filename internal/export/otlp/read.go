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
	out := &profile.Profile{Processes: map[uint32]*profile.Process{}}
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
	slices.SortStableFunc(out.Samples, func(a, b profile.Sample) int { return a.Time.Compare(b.Time) })
	return out, nil
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
	var frames []profile.Frame
	for _, li := range d.dict.StackTable().At(int(si)).LocationIndices().All() {
		if li < 0 || int(li) >= d.dict.LocationTable().Len() {
			return nil, fmt.Errorf("location index %d out of range", li)
		}
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
