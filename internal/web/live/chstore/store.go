package chstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
)

// Options tune a Store. Zero fields take their defaults.
type Options struct {
	// MaxBuffer bounds the encoded rows waiting for ClickHouse (it is
	// down, slow, or the writer is behind); past it the oldest waiting
	// exports are dropped and counted.
	MaxBuffer int
	// FlushEvery is how long the writer waits to gather exports into one
	// insert: ClickHouse wants few large inserts.
	FlushEvery time.Duration
	// RetentionDays keeps this many days of partitions (today included);
	// 0 keeps everything.
	RetentionDays int
	// ListAge is how far back, before the newest span or sample, the
	// trace list looks; MaxSamples bounds the flame graph page of the
	// whole store to the newest samples.
	ListAge    time.Duration
	MaxSamples int
	// Timeout bounds each request to ClickHouse.
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxBuffer <= 0 {
		o.MaxBuffer = 64 << 20
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 200 * time.Millisecond
	}
	if o.ListAge <= 0 {
		o.ListAge = 15 * time.Minute
	}
	if o.MaxSamples <= 0 {
		o.MaxSamples = 1_000_000
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return o
}

// Store is a live.Backend on ClickHouse. Exports are encoded when they
// arrive, buffered (bounded) and inserted by one writer goroutine, so a
// slow or absent ClickHouse never blocks the receiver: it costs counted
// drops once the buffer is full, and the writer catches up when the
// server is back.
type Store struct {
	conn   Conn
	target Target
	db     string
	opts   Options
	log    *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	pending []*batch
	bufSize int
	// inflight and inflightBytes are the exports being written now.
	inflight, inflightBytes int
	// recent holds the ids of exports this process took lately, so an
	// agent's retry to the same instance costs nothing; the table's
	// dedup key covers retries to other instances.
	recent    map[uint64]bool
	recentQ   []uint64
	stackMu   sync.Mutex
	stackSeen map[stackDay]bool
	schemaOK  bool
	st        live.StoreStats
	counts    live.Stats
	merged    *profile.Profile
	mergedAt  uint64
	wake      chan struct{}
}

type stackDay struct {
	hash uint64
	day  uint16
}

const recentBatches = 4096

// New returns a Store on conn for target. Run starts its writer.
func New(conn Conn, target Target, opts Options, log *slog.Logger) *Store {
	s := &Store{conn: conn, target: target, db: target.Database, opts: opts.withDefaults(), log: log, now: time.Now,
		recent: map[uint64]bool{}, stackSeen: map[stackDay]bool{}, wake: make(chan struct{}, 1)}
	s.st.URL = target.String()
	s.st.Status = "connecting"
	s.st.MaxBufferBytes = int64(s.opts.MaxBuffer)
	s.st.RetentionDays = s.opts.RetentionDays
	return s
}

// EnsureSchema creates the database and tables if they are missing.
func (s *Store) EnsureSchema(ctx context.Context) error {
	for _, q := range schema(s.db) {
		if err := s.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create clickhouse schema: %w", err)
		}
	}
	s.mu.Lock()
	s.schemaOK = true
	s.reachedLocked()
	s.mu.Unlock()
	return nil
}

// reachedLocked marks the store ok after a request succeeded, unless
// exports still wait: then only writing them clears the failure.
func (s *Store) reachedLocked() {
	if s.st.Status != "ok" && len(s.pending) == 0 {
		if !s.st.ErrorSince.IsZero() {
			s.log.Info("clickhouse store recovered", "failing_for", s.now().Sub(s.st.ErrorSince).Round(time.Millisecond))
		}
		s.st.Status, s.st.Error, s.st.ErrorSince = "ok", "", time.Time{}
		s.counts.Version++
	}
}

// AddProfile implements live.Backend.
func (s *Store) AddProfile(p *profile.Profile) {
	// Encoding happens outside s.mu, so exports received at once are
	// encoded in parallel; stackMu guards only the stacks written.
	b := encodeProfile(p, func(h uint64, d uint16) bool {
		s.stackMu.Lock()
		defer s.stackMu.Unlock()
		k := stackDay{h, d}
		if s.stackSeen[k] {
			return true
		}
		if len(s.stackSeen) > 1<<20 {
			clear(s.stackSeen)
		}
		s.stackSeen[k] = true
		return false
	})
	s.mu.Lock()
	s.st.ReceivedBatches++
	s.counts.ReceivedBatches++
	s.counts.ReceivedSamples += uint64(b.n)
	if s.recent[b.id] {
		s.st.DuplicateBatches++
		s.mu.Unlock()
		return
	}
	s.remember(b.id)
	s.enqueueLocked(b)
	s.mu.Unlock()
}

// AddSpans implements live.Backend.
func (s *Store) AddSpans(spans []live.Span) {
	if len(spans) == 0 {
		return
	}
	b := encodeSpans(spans, s.now())
	s.mu.Lock()
	s.counts.ReceivedSpans += uint64(len(spans))
	s.enqueueLocked(b)
	s.mu.Unlock()
}

func (s *Store) remember(id uint64) {
	s.recent[id] = true
	s.recentQ = append(s.recentQ, id)
	if len(s.recentQ) > recentBatches {
		delete(s.recent, s.recentQ[0])
		s.recentQ = s.recentQ[1:]
	}
}

func (s *Store) enqueueLocked(b *batch) {
	s.pending = append(s.pending, b)
	s.bufSize += b.size()
	for s.bufSize > s.opts.MaxBuffer && len(s.pending) > 1 {
		old := s.pending[0]
		s.pending = s.pending[1:]
		s.bufSize -= old.size()
		s.st.DroppedSamples += uint64(old.n)
		s.st.DroppedSpans += uint64(old.nSpans)
		s.st.DroppedBatches++
		// A retry of a dropped export is welcome again.
		delete(s.recent, old.id)
		// Its stacks were never written: forget them so later samples
		// write them.
		s.forgetStacks(old)
	}
	s.counts.Version++
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Store) forgetStacks(b *batch) {
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	d := dec{b: b.stacks}
	for d.more() {
		h, day := d.u64(), d.u16()
		delete(s.stackSeen, stackDay{h, day})
		// Skip the rest of the row: 10 arrays.
		skipArray(&d, 8)
		for range 2 {
			n := d.uvarint()
			for range n {
				d.str()
			}
		}
		skipArray(&d, 4)
		skipArray(&d, 1)
		for range 2 {
			n := d.uvarint()
			for range n {
				d.str()
			}
		}
		for range 3 {
			skipArray(&d, 8)
		}
	}
}

func skipArray(d *dec, size int) { d.take(d.uvarint() * size) }

// Admit implements live.Admitter: exports are refused (the sender
// retries) while the buffer is three quarters full, so that what is
// dropped is only what a single export overflows.
func (s *Store) Admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bufSize < s.opts.MaxBuffer*3/4 {
		return nil
	}
	s.st.RefusedBusy++
	why := "writing behind"
	if s.st.Status != "ok" {
		why = s.st.Status + ": " + s.st.Error
	}
	return fmt.Errorf("clickhouse store %s: %d MiB of exports buffered (--store-buffer %d MiB); retry later", why, s.bufSize>>20, s.opts.MaxBuffer>>20)
}

// Reject implements live.Backend.
func (s *Store) Reject() {
	s.mu.Lock()
	s.counts.Rejected++
	s.counts.Version++
	s.mu.Unlock()
}

// Evict implements live.Backend: retention is by day partitions, which
// Run drops.
func (s *Store) Evict() {}

// Stats implements live.Backend: the tables' counts (as of the last
// refresh; rows of a retried export count until parts merge) and this
// instance's ingest counters and store status.
func (s *Store) Stats() live.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.counts
	ss := s.st
	ss.BufferedBatches = len(s.pending) + s.inflight
	ss.BufferedBytes = int64(s.bufSize + s.inflightBytes)
	st.Store = &ss
	st.Batches = int(ss.WrittenBatches)
	st.MaxAgeSec = int64(s.opts.ListAge / time.Second)
	st.MaxSamples = s.opts.MaxSamples
	return st
}
