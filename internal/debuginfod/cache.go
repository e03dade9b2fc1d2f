package debuginfod

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// diskCache keeps fetched files as <dir>/<buildid>/debuginfo, the layout
// of the debuginfod client library, bounded in total size. Recency is the
// file's mtime, touched on every hit, so the order survives restarts.
type diskCache struct {
	dir     string
	max     int64
	evicted *atomic.Uint64

	mu    sync.Mutex
	size  int64
	files map[string]*cacheFile
}

type cacheFile struct {
	size int64
	used time.Time
}

// openDiskCache creates dir and indexes what an earlier run left there.
func openDiskCache(dir string, max int64, evicted *atomic.Uint64) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create debuginfod cache: %w", err)
	}
	c := &diskCache{dir: dir, max: max, evicted: evicted, files: map[string]*cacheFile{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read debuginfod cache: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !validBuildID(e.Name()) {
			continue
		}
		fi, err := os.Stat(c.path(e.Name()))
		if err != nil {
			continue
		}
		c.files[e.Name()] = &cacheFile{size: fi.Size(), used: fi.ModTime()}
		c.size += fi.Size()
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *diskCache) path(buildID string) string {
	return filepath.Join(c.dir, buildID, "debuginfo")
}

// get returns the file's path and marks it used.
func (c *diskCache) get(buildID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.files[buildID]
	if !ok {
		return "", false
	}
	now := time.Now()
	// Touching the file on every hit would write metadata per lookup;
	// once a minute keeps the order across restarts.
	if now.Sub(f.used) > time.Minute {
		os.Chtimes(c.path(buildID), now, now)
	}
	f.used = now
	return c.path(buildID), true
}

// tempFile creates a file for a download in progress, inside the cache
// directory so the final rename stays on one file system.
func (c *diskCache) tempFile(buildID string) (*os.File, error) {
	f, err := os.CreateTemp(c.dir, ".tmp-"+buildID+"-*")
	if err != nil {
		return nil, fmt.Errorf("create cache file: %w", err)
	}
	return f, nil
}

// put moves a verified download into place and evicts to the bound.
func (c *diskCache) put(buildID, tmp string, size int64) error {
	if err := os.MkdirAll(filepath.Join(c.dir, buildID), 0o755); err != nil {
		return fmt.Errorf("store debug file: %w", err)
	}
	if err := os.Rename(tmp, c.path(buildID)); err != nil {
		return fmt.Errorf("store debug file: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.files[buildID]; ok {
		c.size -= old.size
	}
	c.files[buildID] = &cacheFile{size: size, used: time.Now()}
	c.size += size
	c.evictLocked()
	return nil
}

// evictLocked removes least recently used files until the total fits.
// A symbolizer that still has an evicted file open keeps reading it:
// Linux frees the blocks only when it is closed.
func (c *diskCache) evictLocked() {
	if c.size <= c.max {
		return
	}
	ids := make([]string, 0, len(c.files))
	for id := range c.files {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return c.files[ids[i]].used.Before(c.files[ids[j]].used) })
	for _, id := range ids {
		if c.size <= c.max {
			return
		}
		os.RemoveAll(filepath.Join(c.dir, id))
		c.size -= c.files[id].size
		delete(c.files, id)
		c.evicted.Add(1)
	}
}

// bytes reports the cache's total size.
func (c *diskCache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
