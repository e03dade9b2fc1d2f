package chstore

import (
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
)

// stackHash identifies a stack by everything a frame carries, so two
// stacks with one hash are the same stack: xxHash64 of the frames'
// fields, length-prefixed, in scratch (reused between calls). It was
// FNV-1a, a byte at a time: a quarter of serve's CPU under a fleet's
// exports (BENCHMARKS.md).
func stackHash(frames []profile.Frame, scratch *enc) uint64 {
	e := scratch
	e.b = e.b[:0]
	for i := range frames {
		f := &frames[i]
		e.u64(f.Address)
		e.str(f.Function)
		e.str(f.File)
		e.i64(int64(f.Line))
		e.u8(frameFlags(f))
		if m := f.Mapping; m != nil {
			e.str(m.Path)
			e.str(m.BuildID)
			e.str(m.HTLHash)
			e.u64(m.Start)
			e.u64(m.Limit)
			e.u64(m.Offset)
		}
	}
	return xxhash.Sum64(e.b)
}

func frameFlags(f *profile.Frame) uint8 {
	var fl uint8
	if f.Inlined {
		fl |= 1
	}
	if f.NoSymbol {
		fl |= 2
	}
	if f.Mapping != nil {
		fl |= 4
		if f.Mapping.Kernel {
			fl |= 8
		}
		if f.Mapping.BuildID == "" && f.Mapping.HTLHash != "" {
			fl |= 16
		}
	}
	return fl
}

// stackRow encodes a stacksTable row.
func stackRow(e *enc, hash uint64, dayNum uint16, frames []profile.Frame) {
	e.u64(hash)
	e.u16(dayNum)
	e.uvarint(len(frames))
	for i := range frames {
		e.u64(frames[i].Address)
	}
	e.uvarint(len(frames))
	for i := range frames {
		e.str(frames[i].Function)
	}
	e.uvarint(len(frames))
	for i := range frames {
		e.str(frames[i].File)
	}
	e.uvarint(len(frames))
	for i := range frames {
		e.i32(int32(frames[i].Line))
	}
	e.uvarint(len(frames))
	for i := range frames {
		e.u8(frameFlags(&frames[i]))
	}
	mstr := func(get func(m *profile.Mapping) string) {
		e.uvarint(len(frames))
		for i := range frames {
			if m := frames[i].Mapping; m != nil {
				e.str(get(m))
			} else {
				e.str("")
			}
		}
	}
	mnum := func(get func(m *profile.Mapping) uint64) {
		e.uvarint(len(frames))
		for i := range frames {
			if m := frames[i].Mapping; m != nil {
				e.u64(get(m))
			} else {
				e.u64(0)
			}
		}
	}
	mstr(func(m *profile.Mapping) string { return m.Path })
	mstr(func(m *profile.Mapping) string {
		if m.BuildID == "" {
			return m.HTLHash
		}
		return m.BuildID
	})
	mnum(func(m *profile.Mapping) uint64 { return m.Start })
	mnum(func(m *profile.Mapping) uint64 { return m.Limit })
	mnum(func(m *profile.Mapping) uint64 { return m.Offset })
}

// dayOf is ClickHouse's Date of a time: days since the epoch (UTC).
func dayOf(t time.Time) uint16 {
	if t.IsZero() || t.Unix() < 0 {
		return 0
	}
	return uint16(t.Unix() / 86400)
}

func hexOrEmpty(b []byte) string {
	for _, c := range b {
		if c != 0 {
			return hex.EncodeToString(b)
		}
	}
	return ""
}

// batch is one export encoded for insertion.
type batch struct {
	id      uint64
	samples []byte // samplesTable rows
	n       int
	stacks  []byte // stacksTable rows not yet written today by this process
	nStacks int
	spans   []byte // spansTable rows
	nSpans  int
}

func (b *batch) size() int { return len(b.samples) + len(b.stacks) + len(b.spans) }

// encodeProfile turns a decoded export into sample rows and the rows of
// stacks that seen does not hold yet (seen is updated). The batch id is a
// hash of the sample rows (with their BatchId left zero), so the same
// export decoded again gets the same id and the same rows.
func encodeProfile(p *profile.Profile, seen func(hash uint64, day uint16) bool) *batch {
	period := p.PeriodNanos()
	hashes := map[*profile.Frame]uint64{}
	// About 100 bytes a row (ids as hex, names, the ids of the batch):
	// one allocation for most exports.
	rows := enc{b: make([]byte, 0, 128*len(p.Samples))}
	idAt := make([]int, 0, len(p.Samples))
	var st, scratch enc
	nStacks := 0
	for i := range p.Samples {
		s := &p.Samples[i]
		var sh uint64
		if len(s.Frames) > 0 {
			var ok bool
			if sh, ok = hashes[&s.Frames[0]]; !ok {
				sh = stackHash(s.Frames, &scratch)
				hashes[&s.Frames[0]] = sh
			}
			if d := dayOf(s.Time); !seen(sh, d) {
				stackRow(&st, sh, d, s.Frames)
				nStacks++
			}
		}
		var service, host, exe string
		if pr := p.Processes[s.PID]; pr != nil {
			service, exe, host = pr.ServiceName, pr.ExeName, pr.Attributes["host.name"]
		}
		var ns uint64
		if !s.Time.IsZero() && s.Time.UnixNano() > 0 {
			ns = uint64(s.Time.UnixNano())
		}
		rows.u64(ns)
		if s.Link.IsZero() {
			rows.str("")
			rows.str("")
		} else {
			rows.hex(s.Link.TraceID[:])
			rows.hex(s.Link.SpanID[:])
		}
		rows.str(service)
		rows.str(host)
		rows.u32(s.PID)
		rows.str(exe)
		rows.u32(s.TID)
		rows.str(s.ThreadName)
		rows.u8(uint8(s.Kind))
		rows.str(s.State)
		rows.str(s.Reason)
		rows.i64(s.Value)
		rows.i64(period)
		rows.u64(sh)
		attrs := s.Attrs.All()
		rows.uvarint(len(attrs))
		for _, a := range attrs {
			rows.str(a.Key)
		}
		rows.uvarint(len(attrs))
		for _, a := range attrs {
			rows.str(a.Value)
		}
		// BatchId, written once the rows are hashed, and Seq.
		idAt = append(idAt, len(rows.b))
		rows.u64(0)
		rows.u32(uint32(i))
	}
	id := xxhash.Sum64(rows.b)
	for _, at := range idAt {
		binary.LittleEndian.PutUint64(rows.b[at:], id)
	}
	return &batch{id: id, samples: rows.b, n: len(idAt), stacks: st.b, nStacks: nStacks}
}

// encodeSpans turns one trace export into span rows.
func encodeSpans(spans []live.Span, received time.Time) *batch {
	var e enc
	for _, sp := range spans {
		var start uint64
		if !sp.Start.IsZero() && sp.Start.UnixNano() > 0 {
			start = uint64(sp.Start.UnixNano())
		}
		var dur uint64
		if sp.End.After(sp.Start) {
			dur = uint64(sp.End.Sub(sp.Start))
		}
		e.u32(uint32(start / 1e9))
		e.u64(start)
		e.str(hexOrEmpty(sp.TraceID[:]))
		e.str(hexOrEmpty(sp.SpanID[:]))
		e.str(hexOrEmpty(sp.ParentSpanID[:]))
		e.str(sp.Name)
		e.str(sp.Kind)
		e.str(sp.Service)
		e.u64(dur)
		e.str(sp.Status)
		e.u64(uint64(received.UnixNano()))
	}
	return &batch{spans: e.b, nSpans: len(spans)}
}
