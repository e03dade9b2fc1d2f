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

	mu    sync.Mutex
	order *list.List // of *cacheEntry, front is most recent
	items map[string]*list.Element
}

type cacheEntry struct {
	key   string
	done  chan struct{}
	table *Table
	err   error
}

// NewCache returns a cache holding at most max tables (0 means 256).
func NewCache(log *slog.Logger, max int) *Cache {
	if max <= 0 {
		max = 256
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{log: log, max: max, order: list.New(), items: map[string]*list.Element{}}
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
	if c.order.Len() > c.max {
		back := c.order.Back()
		c.order.Remove(back)
		delete(c.items, back.Value.(*cacheEntry).key)
	}
	c.mu.Unlock()

	e.table, e.err = OpenTable(openPath)
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
