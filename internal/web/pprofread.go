package web

import (
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	gpprof "github.com/google/pprof/profile"

	"github.com/spanprof/spanprof/internal/profile"
)

// pprof label keys spanprof writes (internal/export/pprof); the reader
// also accepts numeric labels, as other producers use them for ids.
const (
	labelTraceID      = "trace_id"
	labelSpanID       = "span_id"
	labelThreadID     = "thread.id"
	labelThreadName   = "thread.name"
	labelPID          = "pid"
	labelProcess      = "process"
	labelThreadState  = "thread.state"
	labelOffCPUReason = "off_cpu.reason"
)

// ReadPprof decodes a pprof profile (gzipped or not) into the profile
// model. pprof keeps no per-event times, so every Sample has a zero Time
// and stands for its count: an on-CPU Sample has Value = the samples
// count, an off-CPU one the off_cpu nanoseconds. Profiles from other
// producers work too: their default sample type counts as on-CPU.
func ReadPprof(r io.Reader) (*profile.Profile, error) {
	prof, err := gpprof.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("decode pprof: %w", err)
	}
	onIdx, offIdx := sampleIndices(prof)
	if onIdx < 0 && offIdx < 0 {
		return nil, fmt.Errorf("decode pprof: no sample types")
	}
	p := &profile.Profile{Processes: map[uint32]*profile.Process{}}
	if prof.TimeNanos != 0 {
		p.Start = time.Unix(0, prof.TimeNanos).UTC()
		p.End = p.Start.Add(time.Duration(prof.DurationNanos))
	}
	if prof.Period > 0 && prof.PeriodType != nil && prof.PeriodType.Unit == "nanoseconds" {
		p.Frequency = int(int64(time.Second) / prof.Period)
	}
	mappings := map[*gpprof.Mapping]*profile.Mapping{}
	for _, s := range prof.Sample {
		base := profile.Sample{Frames: frames(s.Location, mappings)}
		labelsInto(&base, s)
		if base.PID != 0 && p.Processes[base.PID] == nil {
			p.Processes[base.PID] = &profile.Process{PID: base.PID, ExeName: first(s.Label[labelProcess])}
		}
		if offIdx >= 0 && s.Value[offIdx] > 0 {
			ev := base
			ev.Kind, ev.Value = profile.OffCPU, s.Value[offIdx]
			p.Samples = append(p.Samples, ev)
		}
		if onIdx >= 0 && s.Value[onIdx] > 0 {
			ev := base
			ev.Kind, ev.Value = profile.OnCPU, s.Value[onIdx]
			ev.State, ev.Reason = "", ""
			p.Samples = append(p.Samples, ev)
		}
	}
	return p, nil
}

// sampleIndices picks the value that counts on-CPU events (samples/count,
// else the default type, else the first) and the off_cpu value, -1 when
// absent.
func sampleIndices(prof *gpprof.Profile) (on, off int) {
	on, off = -1, -1
	for i, st := range prof.SampleType {
		switch {
		case st.Type == "off_cpu":
			off = i
		case st.Type == "samples" && st.Unit == "count":
			on = i
		}
	}
	if on >= 0 {
		return on, off
	}
	for i, st := range prof.SampleType {
		if i != off && (st.Type == prof.DefaultSampleType || prof.DefaultSampleType == "") {
			return i, off
		}
	}
	return on, off
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func labelsInto(ev *profile.Sample, s *gpprof.Sample) {
	num := func(key string) uint32 {
		if v := s.NumLabel[key]; len(v) > 0 {
			return uint32(v[0])
		}
		n, _ := strconv.ParseUint(first(s.Label[key]), 10, 32)
		return uint32(n)
	}
	ev.PID = num(labelPID)
	ev.TID = num(labelThreadID)
	ev.ThreadName = first(s.Label[labelThreadName])
	ev.State = first(s.Label[labelThreadState])
	ev.Reason = first(s.Label[labelOffCPUReason])
	tid, errT := hex.DecodeString(first(s.Label[labelTraceID]))
	sid, errS := hex.DecodeString(first(s.Label[labelSpanID]))
	if errT == nil && errS == nil && len(tid) == 16 && len(sid) == 8 {
		ev.Link = profile.Link{TraceID: [16]byte(tid), SpanID: [8]byte(sid)}
	}
}

// frames converts pprof locations (leaf first, lines innermost first) into
// frames, marking every line but a location's last as inlined.
func frames(locs []*gpprof.Location, mappings map[*gpprof.Mapping]*profile.Mapping) []profile.Frame {
	var out []profile.Frame
	for _, loc := range locs {
		m := mapping(loc.Mapping, mappings)
		if len(loc.Line) == 0 {
			out = append(out, profile.Frame{Address: loc.Address, Mapping: m})
			continue
		}
		for k, ln := range loc.Line {
			f := profile.Frame{Address: loc.Address, Line: int(ln.Line), Mapping: m, Inlined: k < len(loc.Line)-1}
			if ln.Function != nil {
				f.Function, f.File = ln.Function.Name, ln.Function.Filename
			}
			out = append(out, f)
		}
	}
	return out
}

func mapping(pm *gpprof.Mapping, cache map[*gpprof.Mapping]*profile.Mapping) *profile.Mapping {
	if pm == nil {
		return nil
	}
	if m, ok := cache[pm]; ok {
		return m
	}
	m := &profile.Mapping{Start: pm.Start, Limit: pm.Limit, Offset: pm.Offset, Path: pm.File, BuildID: pm.BuildID,
		Kernel: pm.File == profile.KernelMappingPath || strings.HasPrefix(pm.File, "[kernel")}
	cache[pm] = m
	return m
}
