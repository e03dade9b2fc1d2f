package unwind

import (
	"container/list"
	"log/slog"
	"sync"
)

// Cache shares tables between processes by file identity (the GNU build
// ID or content key that symbolize.Identity.Key returns), least recently
// used first out.
type Cache struct {
	log *slog.Logger
	max int
	// maxBytes bounds the section data the cached tables hold: a Go
	// binary's table keeps its whole pclntab (7 MB for a 30 MB binary),
	// so a count alone lets a host of Go programs take hundreds of MB.
	maxBytes int64
	bytes    int64

	mu    sync.Mutex
	order *list.List // of *cacheEntry, front is most recent
	items map[string]*list.Element
}

type cacheEntry struct {
	key   string
	done  chan struct{}
	table *Table
	err   error
	size  int64 // counted in Cache.bytes once the table is read
}

// NewCache returns a cache holding at most max tables (0 means 256).
func NewCache(log *slog.Logger, max int) *Cache {
	if max <= 0 {
		max = 256
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{log: log, max: max, maxBytes: DefaultCacheBytes, order: list.New(), items: map[string]*list.Element{}}
}

// DefaultCacheBytes is the section data a Cache keeps at most.
const DefaultCacheBytes = 24 << 20

// SetMaxBytes bounds the section data the cached tables hold; the most
// recent table stays whatever its size.
func (c *Cache) SetMaxBytes(n int64) {
	c.mu.Lock()
	c.maxBytes = n
	c.evict()
	c.mu.Unlock()
}

// evict drops least recently used tables past the count and byte bounds,
// keeping the most recent one. Callers hold c.mu.
func (c *Cache) evict() {
	for c.order.Len() > 1 && (c.order.Len() > c.max || c.bytes > c.maxBytes) {
		back := c.order.Back()
		e := back.Value.(*cacheEntry)
		c.order.Remove(back)
		delete(c.items, e.key)
		c.bytes -= e.size
	}
}

// Bytes reports the section data the cached tables hold.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Table returns the table of the file identified by key, reading it from
// openPath (a path the agent can read, such as /proc/PID/map_files/...)
// the first time the key is seen. Concurrent callers of one key share one
// parse; a failed parse is remembered until evicted.
func (c *Cache) Table(key, openPath string) (*Table, error) {
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.done
		return e.table, e.err
	}
	e := &cacheEntry{key: key, done: make(chan struct{})}
	c.items[key] = c.order.PushFront(e)
	c.evict()
	c.mu.Unlock()

	table, err := OpenTable(openPath)
	c.mu.Lock()
	e.table, e.err = table, err
	if el, ok := c.items[key]; ok && el.Value == e {
		e.size = table.Size()
		c.bytes += e.size
		c.evict()
	}
	c.mu.Unlock()
	close(e.done)
	if e.err != nil {
		c.log.Debug("read unwind table", "path", openPath, "err", e.err)
	}
	return e.table, e.err
}

// Len reports how many tables are cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
