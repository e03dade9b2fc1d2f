package chstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
)

// sampleCols are the columns a trace view reads, in readSamples' order.
const sampleCols = "TraceId, SpanId, TimeUnixNano, ServiceName, HostName, ProcessPid, ProcessExecutableName, ThreadId, ThreadName, " +
	"Kind, ThreadState, OffCpuReason, Value, Period, StackHash, SampleAttributeKeys, SampleAttributeValues, BatchId, Seq"

type row struct {
	trace [16]byte
	ev    live.Event
	stack uint64
}

type procKey struct {
	host string
	pid  uint32
}

// readSamples decodes sampleCols rows, skipping a (BatchId, Seq) seen
// before: the copy a retried export left before its parts merged.
func readSamples(out []byte) ([]row, error) {
	d := dec{b: out}
	seen := map[[2]uint64]bool{}
	procs := map[procKey]*profile.Process{}
	var rows []row
	for d.more() {
		var r row
		tid, sid := d.str(), d.str()
		smp := &profile.Sample{}
		if ns := d.u64(); ns != 0 {
			smp.Time = time.Unix(0, int64(ns)).UTC()
		}
		service, host := d.str(), d.str()
		smp.PID = d.u32()
		exe := d.str()
		smp.TID = d.u32()
		smp.ThreadName = d.str()
		smp.Kind = profile.Kind(d.u8())
		smp.State, smp.Reason = d.str(), d.str()
		smp.Value = d.i64()
		r.ev.Period = d.i64()
		r.stack = d.u64()
		keys, vals := d.strs(), d.strs()
		batch, seq := d.u64(), d.u32()
		if d.err != nil {
			return nil, d.err
		}
		if k := [2]uint64{batch, uint64(seq)}; seen[k] {
			continue
		} else {
			seen[k] = true
		}
		if len(keys) > 0 && len(keys) == len(vals) {
			kv := make([]profile.Attr, len(keys))
			for i := range keys {
				kv[i] = profile.Attr{Key: keys[i], Value: vals[i]}
			}
			smp.Attrs = profile.MakeAttrs(kv)
		}
		copy(r.trace[:], unhex(tid))
		copy(smp.Link.TraceID[:], unhex(tid))
		copy(smp.Link.SpanID[:], unhex(sid))
		pk := procKey{host, smp.PID}
		pr := procs[pk]
		if pr == nil {
			pr = &profile.Process{PID: smp.PID, ExeName: exe, ServiceName: service}
			if host != "" {
				pr.Attributes = map[string]string{"host.name": host}
			}
			procs[pk] = pr
		}
		r.ev.Sample, r.ev.Process = smp, pr
		rows = append(rows, r)
	}
	return rows, d.err
}

func unhex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}

const spanCols = "TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, StartTimeUnixNano, Duration, StatusCode, ReceivedUnixNano"

// readSpans decodes spanCols rows, keeping the latest copy of each span.
func readSpans(out []byte) ([]live.Span, error) {
	d := dec{b: out}
	type kept struct {
		sp       live.Span
		received uint64
	}
	byID := map[[24]byte]int{}
	var spans []kept
	for d.more() {
		var sp live.Span
		copy(sp.TraceID[:], unhex(d.str()))
		copy(sp.SpanID[:], unhex(d.str()))
		copy(sp.ParentSpanID[:], unhex(d.str()))
		sp.Name, sp.Kind, sp.Service = d.str(), d.str(), d.str()
		start, dur := d.u64(), d.u64()
		if start != 0 {
			sp.Start = time.Unix(0, int64(start)).UTC()
			sp.End = sp.Start.Add(time.Duration(dur))
		}
		sp.Status = d.str()
		received := d.u64()
		if d.err != nil {
			return nil, d.err
		}
		var k [24]byte
		copy(k[:], sp.TraceID[:])
		copy(k[16:], sp.SpanID[:])
		if i, ok := byID[k]; ok {
			if received >= spans[i].received {
				spans[i] = kept{sp, received}
			}
			continue
		}
		byID[k] = len(spans)
		spans = append(spans, kept{sp, received})
	}
	out2 := make([]live.Span, len(spans))
	for i, k := range spans {
		out2[i] = k.sp
	}
	return out2, nil
}

func (s *Store) query(ctx context.Context, sql string) ([]byte, error) {
	if !s.ready() {
		if err := s.EnsureSchema(ctx); err != nil {
			return nil, err
		}
	}
	return s.conn.Query(ctx, sql)
}

func (s *Store) traceData(ctx context.Context, where string) ([]live.Span, []row, error) {
	out, err := s.query(ctx, "SELECT "+spanCols+" FROM "+s.db+"."+spansTable.name+" WHERE "+where)
	if err != nil {
		return nil, nil, err
	}
	spans, err := readSpans(out)
	if err != nil {
		return nil, nil, err
	}
	out, err = s.query(ctx, "SELECT "+sampleCols+" FROM "+s.db+"."+samplesTable.name+" WHERE "+where)
	if err != nil {
		return nil, nil, err
	}
	rows, err := readSamples(out)
	return spans, rows, err
}

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

// TraceView implements live.Backend: two reads of the primary key, the
// trace's spans and its samples.
func (s *Store) TraceView(id [16]byte) (live.TraceView, bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	spans, rows, err := s.traceData(ctx, "TraceId = '"+hex.EncodeToString(id[:])+"'")
	if err != nil {
		return live.TraceView{}, false, err
	}
	events := make([]live.Event, len(rows))
	for i := range rows {
		events[i] = rows[i].ev
	}
	tv, ok := live.BuildTrace(id, spans, events, s.Stats())
	return tv, ok, nil
}

// Flame implements live.Backend.
func (s *Store) Flame(trace [16]byte, span [8]byte, k profile.Kind) (*live.FlameNode, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	tid := hex.EncodeToString(trace[:])
	out, err := s.query(ctx, "SELECT "+spanCols+" FROM "+s.db+"."+spansTable.name+" WHERE TraceId = '"+tid+"'")
	if err != nil {
		return nil, err
	}
	spans, err := readSpans(out)
	if err != nil {
		return nil, err
	}
	out, err = s.query(ctx, fmt.Sprintf("SELECT %s FROM %s.%s WHERE TraceId = '%s' AND SpanId = '%s' AND Kind = %d",
		sampleCols, s.db, samplesTable.name, tid, hex.EncodeToString(span[:]), k))
	if err != nil {
		return nil, err
	}
	rows, err := readSamples(out)
	if err != nil {
		return nil, err
	}
	if err := s.attachStacks(ctx, rows); err != nil {
		return nil, err
	}
	events := make([]live.Event, len(rows))
	for i := range rows {
		events[i] = rows[i].ev
	}
	return live.BuildSpanFlame(span, spans, events, k), nil
}

// attachStacks reads the stacks rows name and sets each sample's frames.
func (s *Store) attachStacks(ctx context.Context, rows []row) error {
	ids := map[uint64]bool{}
	for _, r := range rows {
		if r.stack != 0 {
			ids[r.stack] = true
		}
	}
	if len(ids) == 0 {
		return nil
	}
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, fmt.Sprint(id))
	}
	slices.Sort(list)
	frames := map[uint64][]profile.Frame{}
	mappings := map[profile.Mapping]*profile.Mapping{}
	for len(list) > 0 {
		n := min(len(list), 5000)
		out, err := s.query(ctx, "SELECT StackHash, Addresses, FunctionNames, FileNames, LineNumbers, FrameFlags, MappingFileNames, "+
			"MappingBuildIds, MappingStarts, MappingLimits, MappingOffsets FROM "+s.db+"."+stacksTable.name+
			" WHERE StackHash IN ("+strings.Join(list[:n], ",")+") LIMIT 1 BY StackHash")
		if err != nil {
			return err
		}
		list = list[n:]
		if err := readStacks(out, frames, mappings); err != nil {
			return err
		}
	}
	for i := range rows {
		rows[i].ev.Sample.Frames = frames[rows[i].stack]
	}
	return nil
}

func readStacks(out []byte, frames map[uint64][]profile.Frame, mappings map[profile.Mapping]*profile.Mapping) error {
	d := dec{b: out}
	u64s := func() []uint64 {
		n := d.uvarint()
		v := make([]uint64, 0, min(n, 4096))
		for range n {
			v = append(v, d.u64())
		}
		return v
	}
	for d.more() {
		h := d.u64()
		addr := u64s()
		fn, file := d.strs(), d.strs()
		n := d.uvarint()
		lines := make([]int32, 0, min(n, 4096))
		for range n {
			lines = append(lines, d.i32())
		}
		n = d.uvarint()
		flags := d.take(n)
		mpath, mbuild := d.strs(), d.strs()
		mstart, mlimit, moff := u64s(), u64s(), u64s()
		if d.err != nil {
			return d.err
		}
		k := len(addr)
		if len(fn) != k || len(file) != k || len(lines) != k || len(flags) != k || len(mpath) != k || len(mbuild) != k ||
			len(mstart) != k || len(mlimit) != k || len(moff) != k {
			return fmt.Errorf("decode stack %d: arrays of different lengths", h)
		}
		fs := make([]profile.Frame, k)
		for i := range fs {
			fs[i] = profile.Frame{Address: addr[i], Function: fn[i], File: file[i], Line: int(lines[i]),
				Inlined: flags[i]&1 != 0, NoSymbol: flags[i]&2 != 0}
			if flags[i]&4 != 0 {
				m := profile.Mapping{Start: mstart[i], Limit: mlimit[i], Offset: moff[i], Path: mpath[i], Kernel: flags[i]&8 != 0}
				if flags[i]&16 != 0 {
					m.HTLHash = mbuild[i]
				} else {
					m.BuildID = mbuild[i]
				}
				p := mappings[m]
				if p == nil {
					p = &m
					mappings[m] = p
				}
				fs[i].Mapping = p
			}
		}
		frames[h] = fs
	}
	return d.err
}

// TraceList implements live.Backend: the newest traces among the spans
// and the samples of the last ListAge before the newest of each, then
// their spans and samples, counted as the in-memory window counts them.
func (s *Store) TraceList(limit int) ([]live.TraceSummary, error) {
	if limit <= 0 {
		limit = 1000
	}
	ctx, cancel := s.ctx()
	defer cancel()
	age := uint64(s.opts.ListAge)
	q := fmt.Sprintf("SELECT TraceId, min(StartTimeUnixNano) AS t FROM %[1]s.%[2]s WHERE Timestamp >= "+
		"(SELECT max(Timestamp) FROM %[1]s.%[2]s) - %[3]d GROUP BY TraceId ORDER BY t DESC LIMIT %[4]d",
		s.db, spansTable.name, age/1e9, limit)
	out, err := s.query(ctx, q)
	if err != nil {
		return nil, err
	}
	cand := map[string]uint64{}
	d := dec{b: out}
	for d.more() {
		id := d.str()
		cand[id] = d.u64()
	}
	q = fmt.Sprintf("SELECT TraceId, min(TimeUnixNano) AS t FROM %[1]s.%[2]s WHERE TraceId != '' AND TimeUnixNano >= "+
		"(SELECT max(TimeUnixNano) FROM %[1]s.%[2]s) - %[3]d GROUP BY TraceId ORDER BY t DESC LIMIT %[4]d",
		s.db, samplesTable.name, age, limit)
	out, err = s.query(ctx, q)
	if err != nil {
		return nil, err
	}
	d = dec{b: out}
	for d.more() {
		id, t := d.str(), d.u64()
		if c, ok := cand[id]; !ok || t < c {
			cand[id] = t
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(cand) == 0 {
		return []live.TraceSummary{}, nil
	}
	ids := make([]string, 0, len(cand))
	for id := range cand {
		ids = append(ids, "'"+id+"'")
	}
	slices.Sort(ids)
	spans, rows, err := s.traceData(ctx, "TraceId IN ("+strings.Join(ids, ",")+")")
	if err != nil {
		return nil, err
	}
	return live.BuildTraces(spans, func(yield func(trace [16]byte, e live.Event)) {
		for _, r := range rows {
			yield(r.trace, r.ev)
		}
	}, limit), nil
}

// Profile implements live.Backend: the newest MaxSamples samples of the
// last ListAge, for the flame graph page of the whole store.
func (s *Store) Profile() (*profile.Profile, error) {
	st := s.Stats()
	s.mu.Lock()
	if s.merged != nil && s.mergedAt == st.Version {
		p := s.merged
		s.mu.Unlock()
		return p, nil
	}
	s.mu.Unlock()
	ctx, cancel := s.ctx()
	defer cancel()
	q := fmt.Sprintf("SELECT %[1]s FROM %[2]s.%[3]s WHERE TimeUnixNano >= (SELECT max(TimeUnixNano) FROM %[2]s.%[3]s) - %[4]d "+
		"ORDER BY TimeUnixNano DESC LIMIT %[5]d", sampleCols, s.db, samplesTable.name, uint64(s.opts.ListAge), s.opts.MaxSamples)
	out, err := s.query(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := readSamples(out)
	if err != nil {
		return nil, err
	}
	if err := s.attachStacks(ctx, rows); err != nil {
		return nil, err
	}
	p := &profile.Profile{Processes: map[uint32]*profile.Process{}, Samples: make([]profile.Sample, 0, len(rows))}
	for i := len(rows) - 1; i >= 0; i-- {
		e := rows[i].ev
		smp := *e.Sample
		if p.Frequency == 0 && e.Period > 0 {
			p.Frequency = int(time.Second / time.Duration(e.Period))
		}
		if p.Start.IsZero() || (!smp.Time.IsZero() && smp.Time.Before(p.Start)) {
			p.Start = smp.Time
		}
		if smp.Time.After(p.End) {
			p.End = smp.Time
		}
		p.Processes[smp.PID] = e.Process
		p.Samples = append(p.Samples, smp)
	}
	s.mu.Lock()
	s.merged, s.mergedAt = p, st.Version
	s.mu.Unlock()
	return p, nil
}

var _ live.Backend = (*Store)(nil)
