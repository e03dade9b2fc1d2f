package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
)

// nodeTemplate is one node's export: built once from the recording, then
// moved to each interval in place.
type nodeTemplate struct {
	pd      pprofile.Profiles
	samples int
	host    string
	from    time.Time
	shift   time.Duration
	wins    []traceWindow
	// links[i] is the link table entry of window i's root and child.
	links [][2]int
	// base holds each timestamp of the template, to shift from.
	base [][]uint64
}

type traceWindow struct {
	tid        [16]byte
	root, kid  [8]byte
	start, end time.Time
}

// newTemplate builds node's report for the interval from: n on-CPU and
// nOff off-CPU samples taken in turn from the recording, spread over the
// interval, and nTraces traces whose spans link the samples that fall in
// them.
func newTemplate(rec *profile.Profile, on, off []profile.Sample, node int, from time.Time, interval time.Duration, n, nOff, nTraces int,
	rnd *rand.Rand) *nodeTemplate {
	host := fmt.Sprintf("node-%02d", node)
	p := &profile.Profile{Start: from, End: from.Add(interval), Frequency: rec.Frequency, Processes: map[uint32]*profile.Process{}}
	for pid, pr := range rec.Processes {
		cp := *pr
		cp.Attributes = map[string]string{"host.name": host}
		if cp.ServiceName == "" {
			cp.ServiceName = "svc-" + host
		}
		p.Processes[pid] = &cp
	}
	wins := make([]traceWindow, nTraces)
	step := interval / time.Duration(max(1, nTraces))
	for i := range wins {
		w := &wins[i]
		binaryRand(rnd, w.tid[:])
		binaryRand(rnd, w.root[:])
		binaryRand(rnd, w.kid[:])
		w.start = from.Add(time.Duration(i) * step)
		w.end = w.start.Add(200 * time.Millisecond)
	}
	link := func(t time.Time) profile.Link {
		i := int(t.Sub(from) / step)
		if i < 0 || i >= len(wins) || t.After(wins[i].end) {
			return profile.Link{}
		}
		w := wins[i]
		if d := t.Sub(w.start); d >= 50*time.Millisecond && d < 150*time.Millisecond {
			return profile.Link{TraceID: w.tid, SpanID: w.kid}
		}
		return profile.Link{TraceID: w.tid, SpanID: w.root}
	}
	off0 := rnd.IntN(max(1, len(off)))
	on0 := rnd.IntN(len(on))
	p.Samples = make([]profile.Sample, 0, n+nOff)
	for i := range n {
		s := on[(on0+i)%len(on)]
		s.Time = from.Add(interval * time.Duration(i) / time.Duration(n)).Add(time.Duration(rnd.IntN(1000)) * time.Microsecond)
		s.Link = link(s.Time)
		p.Samples = append(p.Samples, s)
	}
	for i := range nOff {
		if len(off) == 0 {
			break
		}
		s := off[(off0+i)%len(off)]
		s.Time = from.Add(interval * time.Duration(i) / time.Duration(nOff)).Add(time.Duration(rnd.IntN(1000)) * time.Microsecond)
		s.Link = link(s.Time)
		p.Samples = append(p.Samples, s)
	}
	tm := &nodeTemplate{pd: otlp.Build(p), samples: len(p.Samples), host: host, from: from, wins: wins, links: make([][2]int, len(wins))}
	idx := map[[24]byte]int{}
	lt := tm.pd.Dictionary().LinkTable()
	for j := 0; j < lt.Len(); j++ {
		var k [24]byte
		tid, sid := lt.At(j).TraceID(), lt.At(j).SpanID()
		copy(k[:], tid[:])
		copy(k[16:], sid[:])
		idx[k] = j
	}
	for i, w := range wins {
		for r, sid := range [][8]byte{w.root, w.kid} {
			var k [24]byte
			copy(k[:], w.tid[:])
			copy(k[16:], sid[:])
			j, ok := idx[k]
			if !ok {
				j = -1
			}
			tm.links[i][r] = j
		}
	}
	tm.eachSample(func(ts pcommon.UInt64Slice) { tm.base = append(tm.base, ts.AsRaw()) })
	return tm
}

func (tm *nodeTemplate) eachSample(fn func(ts pcommon.UInt64Slice)) {
	for _, rp := range tm.pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, smp := range pr.Samples().All() {
					fn(smp.TimestampsUnixNano())
				}
			}
		}
	}
}

// next moves the template shift after its first interval, with fresh
// trace and span ids, and returns the interval's spans and trace ids.
func (tm *nodeTemplate) next(shift time.Duration, rnd *rand.Rand) (ptrace.Traces, []string) {
	j := 0
	tm.eachSample(func(ts pcommon.UInt64Slice) {
		b := tm.base[j]
		for i := range b {
			ts.SetAt(i, b[i]+uint64(shift))
		}
		j++
	})
	for _, rp := range tm.pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				pr.SetTime(pcommon.NewTimestampFromTime(tm.from.Add(shift)))
			}
		}
	}
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "svc-"+tm.host)
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	lt := tm.pd.Dictionary().LinkTable()
	ids := make([]string, len(tm.wins))
	for i := range tm.wins {
		w := &tm.wins[i]
		binaryRand(rnd, w.tid[:])
		binaryRand(rnd, w.root[:])
		binaryRand(rnd, w.kid[:])
		ids[i] = fmt.Sprintf("%x", w.tid)
		start := w.start.Add(shift)
		for r, sp := range []struct {
			id   [8]byte
			name string
			a, b time.Duration
		}{{w.root, "GET /work", 0, 200 * time.Millisecond}, {w.kid, "compute", 50 * time.Millisecond, 150 * time.Millisecond}} {
			if l := tm.links[i][r]; l >= 0 {
				lt.At(l).SetTraceID(pcommon.TraceID(w.tid))
				lt.At(l).SetSpanID(pcommon.SpanID(sp.id))
			}
			s := ss.AppendEmpty()
			s.SetTraceID(pcommon.TraceID(w.tid))
			s.SetSpanID(pcommon.SpanID(sp.id))
			if r > 0 {
				s.SetParentSpanID(pcommon.SpanID(w.root))
			}
			s.SetName(sp.name)
			s.SetKind(ptrace.SpanKindServer)
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(start.Add(sp.a)))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(sp.b)))
		}
	}
	return td, ids
}
