package unwind

import (
	"container/list"
	"debug/elf"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// Cache shares tables between processes by file identity (the GNU build
// ID or content key that symbolize.Identity.Key returns), least recently
// used first out.
type Cache struct {
	log  *slog.Logger
	opts CacheOptions
	// pcln holds the Go pclntabs of the cached tables, shared with the
	// symbolizer when both use one store; what it is charged counts
	// towards MaxBytes.
	pcln *gopclntab.Holder

	// evicted counts tables dropped by the count and byte bounds;
	// expired those dropped idle.
	evicted, expired atomic.Uint64

	mu    sync.Mutex
	bytes int64      // the entries' size, shared pclntabs not included
	order *list.List // of *cacheEntry, front is most recent
	items map[string]*list.Element
}

// CacheOptions configures a Cache.
type CacheOptions struct {
	// Max bounds the number of tables; zero means 256.
	Max int
	// MaxBytes bounds the section data the cached tables hold: a Go
	// binary's table keeps its whole pclntab (7 MB for a 30 MB binary),
	// so a count alone lets a host of Go programs take hundreds of MB.
	// The most recent table stays whatever its size. Zero means
	// DefaultCacheBytes.
	MaxBytes int64
	// IdleTimeout drops, at the next Trim, tables that Table has not
	// returned for that long. Zero means DefaultIdleTimeout; negative
	// keeps them.
	IdleTimeout time.Duration
	// Now is the clock of IdleTimeout; nil means time.Now.
	Now func() time.Time
	// Pclntabs shares Go pclntabs with the symbolizer
	// (symbolize.Symbolizer.Pclntabs); nil keeps a store of the cache's
	// own.
	Pclntabs *gopclntab.Store
}

type cacheEntry struct {
	key   string
	done  chan struct{}
	table *Table
	err   error
	// size is counted in Cache.bytes once the table is read; claimed
	// while the entry holds a claim on the table's pclntab; used is when
	// Table last returned the entry. All are guarded by Cache.mu.
	size    int64
	claimed bool
	used    time.Time
}

// DefaultCacheBytes is the section data a Cache keeps at most.
const DefaultCacheBytes = 24 << 20

// DefaultIdleTimeout is how long a table stays unused before Trim drops
// it. The leaf fixer remembers the rule at each hot ip, so a table is
// used only for ips not seen before: one idle this long belongs to a
// program that is gone or whose hot code is all known.
const DefaultIdleTimeout = 5 * time.Minute

// NewCache returns a cache of tables.
func NewCache(log *slog.Logger, opts CacheOptions) *Cache {
	if opts.Max <= 0 {
		opts.Max = 256
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultCacheBytes
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Pclntabs == nil {
		opts.Pclntabs = gopclntab.NewStore()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{log: log, opts: opts, pcln: opts.Pclntabs.Holder(), order: list.New(), items: map[string]*list.Element{}}
}

// SetMaxBytes bounds the section data the cached tables hold; the most
// recent table stays whatever its size.
func (c *Cache) SetMaxBytes(n int64) {
	c.mu.Lock()
	c.opts.MaxBytes = n
	c.evict()
	c.mu.Unlock()
}

// evict drops least recently used tables past the count and byte bounds,
// keeping the most recent one. Callers hold c.mu.
func (c *Cache) evict() {
	for c.order.Len() > 1 && (c.order.Len() > c.opts.Max || c.bytes+c.pcln.Charged() > c.opts.MaxBytes) {
		c.log.Debug("evict unwind table over the bound", "key", c.order.Back().Value.(*cacheEntry).key)
		c.remove(c.order.Back())
		c.evicted.Add(1)
	}
}

// remove drops one entry. Callers hold c.mu.
func (c *Cache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.order.Remove(el)
	delete(c.items, e.key)
	c.bytes -= e.size
	if e.claimed {
		e.claimed = false
		c.pcln.Release(e.key)
	}
}

// Trim drops the tables idle for IdleTimeout, and applies the byte bound
// again: another holder of a shared pclntab may have passed its charge
// on to this cache. Call it now and then (the agent does after every
// report).
func (c *Cache) Trim() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.IdleTimeout >= 0 {
		cutoff := c.opts.Now().Add(-c.opts.IdleTimeout)
		// The list's order is that of use: the idle are at its back.
		for el := c.order.Back(); el != nil && el.Value.(*cacheEntry).used.Before(cutoff); el = c.order.Back() {
			c.log.Debug("drop idle unwind table", "key", el.Value.(*cacheEntry).key)
			c.remove(el)
			c.expired.Add(1)
		}
	}
	c.evict()
	// The pages of mapped sections that this batch's lookups touched.
	for el := c.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*cacheEntry)
		select {
		case <-e.done:
			if e.table != nil {
				e.table.dropPages()
			}
		default: // still being read
		}
	}
}

// Evicted reports the tables dropped by the count and byte bounds and
// those dropped idle (Trim). An evicted table is read again when a sample
// needs it.
func (c *Cache) Evicted() (bound, idle uint64) { return c.evicted.Load(), c.expired.Load() }

// Bytes reports the section data the cached tables hold, counting the
// pclntabs shared with the symbolizer only when this cache pays for them.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes + c.pcln.Charged()
}

// Table returns the table of the file identified by key, reading it from
// openPath (a path the agent can read, such as /proc/PID/map_files/...)
// the first time the key is seen. Concurrent callers of one key share one
// parse; a failed parse is remembered until evicted.
func (c *Cache) Table(key, openPath string) (*Table, error) {
	c.mu.Lock()
	now := c.opts.Now()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		e.used = now
		c.mu.Unlock()
		<-e.done
		return e.table, e.err
	}
	e := &cacheEntry{key: key, done: make(chan struct{}), used: now}
	c.items[key] = c.order.PushFront(e)
	c.evict()
	c.mu.Unlock()

	table, claimed, err := c.open(key, openPath)
	c.mu.Lock()
	e.table, e.err = table, err
	switch el, ok := c.items[key]; {
	case ok && el.Value == e && err == nil:
		e.claimed = claimed
		e.size = table.Size()
		if claimed {
			e.size -= table.pcln.Size()
		}
		c.bytes += e.size
		c.evict()
	case claimed:
		// Evicted while it was read.
		c.pcln.Release(key)
	}
	c.mu.Unlock()
	close(e.done)
	if e.err != nil {
		c.log.Debug("read unwind table", "path", openPath, "err", e.err)
	}
	return e.table, e.err
}

// open reads the table of the file at openPath, claiming its Go pclntab
// from the shared store under key; claimed says whether the table holds
// a claim.
func (c *Cache) open(key, openPath string) (t *Table, claimed bool, err error) {
	t, err = openTableWith(openPath, func(f *elf.File) (*gopclntab.Table, error) {
		p, err := c.pcln.Claim(key, func() (*gopclntab.Table, error) { return gopclntab.Find(f) })
		claimed = err == nil
		return p, err
	})
	if err != nil && claimed {
		c.pcln.Release(key)
		claimed = false
	}
	return t, claimed, err
}

// Len reports how many tables are cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
