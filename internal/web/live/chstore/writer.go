package chstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Run writes buffered exports until ctx ends, refreshes the table counts
// every two seconds and drops expired partitions every hour. On the way
// out it tries once more to write what is buffered.
func (s *Store) Run(ctx context.Context) {
	// The counts have their own goroutine: a writer that is behind
	// flushes back to back and would starve them.
	countsDone := make(chan struct{})
	go func() {
		defer close(countsDone)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.refreshCounts(ctx)
			}
		}
	}()
	defer func() { <-countsDone }()
	var lastRetention time.Time
	backoff := 100 * time.Millisecond
	for {
		if !s.ready() {
			if err := s.EnsureSchema(ctx); err != nil {
				s.fail(err)
			}
		}
		if s.ready() && s.now().Sub(lastRetention) > time.Hour {
			lastRetention = s.now()
			if err := s.dropExpired(ctx); err != nil {
				s.log.Warn("drop expired partitions; trying again in a minute", "err", err)
				lastRetention = lastRetention.Add(-59 * time.Minute)
			}
		}
		err := s.flush(ctx)
		if err != nil {
			s.fail(err)
		} else {
			backoff = 100 * time.Millisecond
		}
		wait := s.opts.FlushEvery
		if err != nil || !s.ready() {
			wait = backoff
			backoff = min(backoff*2, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.flush(fctx); err != nil {
				s.log.Warn("write buffered exports at exit", "err", err)
			}
			cancel()
			return
		case <-time.After(wait):
		case <-s.wake:
			if err == nil {
				// Gather what arrives in the next FlushEvery into the
				// same insert.
				select {
				case <-time.After(s.opts.FlushEvery):
				case <-ctx.Done():
				}
			}
		}
	}
}

func (s *Store) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.schemaOK
}

func (s *Store) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Status == "ok" || s.st.ErrorSince.IsZero() {
		s.st.ErrorSince = s.now()
		s.log.Warn("clickhouse store failing; buffering exports", "err", err)
	}
	s.st.Status = "failing"
	s.st.Error = err.Error()
	s.st.FlushErrors++
	s.counts.Version++
}

// flush inserts everything pending: stacks first, so a reader finds the
// stacks of every sample it sees, then spans, then samples. What fails
// goes back to the front of the buffer.
func (s *Store) flush(ctx context.Context) error {
	s.mu.Lock()
	if !s.schemaOK || len(s.pending) == 0 {
		s.mu.Unlock()
		return nil
	}
	// At most maxInsert bytes per insert: the rows are copied into one
	// body, and ClickHouse gains little from larger inserts.
	k, size := 0, 0
	for k < len(s.pending) && (k == 0 || size+s.pending[k].size() <= maxInsert) {
		size += s.pending[k].size()
		k++
	}
	todo := s.pending[:k:k]
	s.pending = append([]*batch(nil), s.pending[k:]...)
	s.bufSize -= size
	s.inflight, s.inflightBytes = k, size
	more := len(s.pending) > 0
	s.mu.Unlock()

	var stacks, spans, samples []byte
	var nStacks, nSpans, nSamples int
	for _, b := range todo {
		stacks = append(stacks, b.stacks...)
		spans = append(spans, b.spans...)
		samples = append(samples, b.samples...)
		nStacks += b.nStacks
		nSpans += b.nSpans
		nSamples += b.n
	}
	t0 := s.now()
	var err error
	step := 0
	for i, part := range []struct {
		t    table
		rows []byte
	}{{stacksTable, stacks}, {spansTable, spans}, {samplesTable, samples}} {
		if len(part.rows) == 0 {
			step = i + 1
			continue
		}
		if err = s.conn.Insert(ctx, s.db+"."+part.t.name, part.t.cols, part.rows); err != nil {
			break
		}
		step = i + 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight, s.inflightBytes = 0, 0
	if err != nil {
		// Put back what was not written; parts already written are not
		// sent again (a rewrite would be folded anyway).
		for _, b := range todo {
			if step >= 1 {
				b.stacks, b.nStacks = nil, 0
			}
			if step >= 2 {
				b.spans, b.nSpans = nil, 0
			}
		}
		s.pending = append(todo, s.pending...)
		s.bufSize = 0
		for _, b := range s.pending {
			s.bufSize += b.size()
		}
		for s.bufSize > s.opts.MaxBuffer && len(s.pending) > 1 {
			old := s.pending[0]
			s.pending = s.pending[1:]
			s.bufSize -= old.size()
			s.st.DroppedSamples += uint64(old.n)
			s.st.DroppedSpans += uint64(old.nSpans)
			s.st.DroppedBatches++
			delete(s.recent, old.id)
			s.forgetStacks(old)
		}
		return fmt.Errorf("insert into clickhouse: %w", err)
	}
	if s.st.Status != "ok" {
		if !s.st.ErrorSince.IsZero() {
			s.log.Info("clickhouse store recovered", "failing_for", s.now().Sub(s.st.ErrorSince).Round(time.Millisecond))
		}
		s.st.Status, s.st.Error, s.st.ErrorSince = "ok", "", time.Time{}
	}
	s.st.WrittenSamples += uint64(nSamples)
	s.st.WrittenSpans += uint64(nSpans)
	s.st.WrittenStacks += uint64(nStacks)
	s.st.WrittenBatches += uint64(len(todo))
	s.st.LastFlush = s.now()
	s.st.LastFlushMs = float64(s.now().Sub(t0).Microseconds()) / 1000
	s.counts.Version++
	if more {
		s.mu.Unlock()
		err := s.flush(ctx)
		s.mu.Lock()
		return err
	}
	return nil
}

// maxInsert bounds the rows sent in one insert.
const maxInsert = 16 << 20

// Flush writes what is buffered now; tests and shutdown use it.
func (s *Store) Flush(ctx context.Context) error {
	if !s.ready() {
		if err := s.EnsureSchema(ctx); err != nil {
			s.fail(err)
			return err
		}
	}
	if err := s.flush(ctx); err != nil {
		s.fail(err)
		return err
	}
	s.refreshCounts(ctx)
	return nil
}

// refreshCounts reads the tables' sizes from system.parts and the number
// of traces from the spans table, for /api/window.
func (s *Store) refreshCounts(ctx context.Context) {
	if !s.ready() {
		return
	}
	q := "SELECT table, toUInt64(sum(rows)), toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE database = '" + s.db +
		"' AND active GROUP BY table"
	out, err := s.conn.Query(ctx, q)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.fail(err)
		}
		return
	}
	rows := map[string][2]uint64{}
	d := dec{b: out}
	for d.more() {
		t := d.str()
		rows[t] = [2]uint64{d.u64(), d.u64()}
	}
	var traces uint64
	if out, err := s.conn.Query(ctx, "SELECT toUInt64(uniq(TraceId)) FROM "+s.db+"."+spansTable.name); err == nil && len(out) == 8 {
		traces = (&dec{b: out}).u64()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reachedLocked()
	n := uint64(rows[samplesTable.name][0] + rows[spansTable.name][0])
	if n != s.st.TableRows {
		s.counts.Version++
	}
	s.st.TableRows = n
	s.counts.Samples = int(rows[samplesTable.name][0])
	s.counts.Spans = int(rows[spansTable.name][0])
	s.counts.Traces = int(traces)
	s.st.Stacks = rows[stacksTable.name][0]
	s.st.DiskBytes = rows[samplesTable.name][1] + rows[stacksTable.name][1] + rows[spansTable.name][1]
	s.counts.Bytes = int64(s.st.DiskBytes)
}

// dropExpired drops the day partitions older than the retention.
func (s *Store) dropExpired(ctx context.Context) error {
	if s.opts.RetentionDays <= 0 {
		return nil
	}
	cut := s.now().UTC().AddDate(0, 0, -(s.opts.RetentionDays - 1))
	keep := uint64(cut.Year()*10000 + int(cut.Month())*100 + cut.Day())
	out, err := s.conn.Query(ctx, "SELECT DISTINCT table, partition FROM system.parts WHERE database = '"+s.db+"' AND active")
	if err != nil {
		return err
	}
	d := dec{b: out}
	for d.more() {
		t, part := d.str(), d.str()
		var n uint64
		if _, err := fmt.Sscan(part, &n); err != nil || n >= keep {
			continue
		}
		if err := s.conn.Exec(ctx, "ALTER TABLE "+s.db+"."+t+" DROP PARTITION "+part); err != nil {
			return err
		}
		s.log.Info("dropped expired partition", "table", t, "partition", part)
	}
	return d.err
}
