// Package debuginfod fetches separate debug files by GNU build ID from
// debuginfod servers (GET /buildid/<hex>/debuginfo), out of band: the
// symbolizer asks with Request, which never blocks, and finds the file
// with Cached once a background worker stored it in a size-bounded
// on-disk cache. Failures are remembered for a while (negative cache) so
// that a missing build ID costs one round of requests, not one per
// profile.
package debuginfod

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Client. Zero values take the defaults noted.
type Options struct {
	// URLs are the servers, tried in order (DEBUGINFOD_URLS).
	URLs []string
	// CacheDir holds fetched files as <dir>/<buildid>/debuginfo.
	// Default: DefaultCacheDir().
	CacheDir string
	// MaxCacheBytes bounds the cache; the least recently used files go
	// first. Default 1 GiB.
	MaxCacheBytes int64
	// MaxFileBytes refuses larger responses. Default 512 MiB.
	MaxFileBytes int64
	// Timeout bounds one request to one server, body included. Default 30s.
	Timeout time.Duration
	// NegativeTTL is how long a build ID that no server could supply is
	// not asked for again. Default 10 minutes.
	NegativeTTL time.Duration
	// MaxConcurrent bounds the requests in flight. Default 2.
	MaxConcurrent int
	// MaxPending bounds the queued build IDs; more are dropped and
	// counted. Default 1024.
	MaxPending int
	// Verify checks a downloaded file before it enters the cache
	// (symbolize.VerifyDebugFile). Default: it must parse as ELF.
	Verify func(path, buildID string) error
	// HTTPClient defaults to one without an overall timeout (Timeout
	// applies per request).
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Stats counts what the client did; every failed fetch is in one of the
// error counters.
type Stats struct {
	Requested uint64 // build IDs queued
	Fetched   uint64 // files stored in the cache
	CacheHits uint64 // Cached answered from disk
	// Negative counts Requests skipped because of a recent failure.
	Negative  uint64
	Dropped   uint64 // requests beyond MaxPending
	NotFound  uint64 // every server answered 404
	Timeouts  uint64 // per-request timeouts
	HTTPError uint64 // other statuses, connection errors
	Invalid   uint64 // bodies refused by Verify, or too large
	Evicted   uint64 // files removed to keep the size bound
	Pending   int    // requests queued or in flight
}

// ErrNotFound is returned when no server has the build ID.
var ErrNotFound = errors.New("debuginfod: build ID not found")

// URLsFromEnv splits DEBUGINFOD_URLS, which holds space-separated server
// URLs.
func URLsFromEnv() []string {
	return strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
}

// DefaultCacheDir is $XDG_CACHE_HOME/spanprof/debuginfod, else
// /var/cache/spanprof/debuginfod: the agent runs as root without a home
// worth caching in.
func DefaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "spanprof", "debuginfod")
	}
	return "/var/cache/spanprof/debuginfod"
}

// Client fetches and caches debug files. Its methods are safe for
// concurrent use.
type Client struct {
	opts  Options
	log   *slog.Logger
	http  *http.Client
	cache *diskCache
	sem   chan struct{}

	mu       sync.Mutex
	pending  map[string]chan struct{} // build ID → closed when done
	negative map[string]time.Time     // build ID → retry after
	idle     *sync.Cond               // signalled when pending shrinks

	requested, fetched, hits, negHits, dropped       atomic.Uint64
	notFound, timeouts, httpErrors, invalid, evicted atomic.Uint64
}

// New returns a client; it creates the cache directory.
func New(opts Options) (*Client, error) {
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = 1 << 30
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = 512 << 20
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.NegativeTTL <= 0 {
		opts.NegativeTTL = 10 * time.Minute
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 2
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 1024
	}
	if opts.Verify == nil {
		opts.Verify = verifyELF
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		opts:     opts,
		log:      opts.Logger,
		http:     opts.HTTPClient,
		sem:      make(chan struct{}, opts.MaxConcurrent),
		pending:  map[string]chan struct{}{},
		negative: map[string]time.Time{},
	}
	c.idle = sync.NewCond(&c.mu)
	dc, err := openDiskCache(opts.CacheDir, opts.MaxCacheBytes, &c.evicted)
	if err != nil {
		return nil, err
	}
	c.cache = dc
	return c, nil
}

// Cached returns the path of the cached debug file of buildID.
func (c *Client) Cached(buildID string) (string, bool) {
	if !validBuildID(buildID) {
		return "", false
	}
	p, ok := c.cache.get(buildID)
	if ok {
		c.hits.Add(1)
	}
	return p, ok
}

// Request queues a fetch of buildID and returns at once. Build IDs that
// are cached, already queued, or failed within NegativeTTL are skipped.
func (c *Client) Request(buildID string) {
	if !validBuildID(buildID) || len(c.opts.URLs) == 0 {
		return
	}
	if _, ok := c.cache.get(buildID); ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[buildID]; ok {
		return
	}
	if until, ok := c.negative[buildID]; ok {
		if time.Now().Before(until) {
			c.negHits.Add(1)
			return
		}
		delete(c.negative, buildID)
	}
	if len(c.pending) >= c.opts.MaxPending {
		c.dropped.Add(1)
		c.log.Warn("debuginfod queue full, request dropped", "build_id", buildID)
		return
	}
	done := make(chan struct{})
	c.pending[buildID] = done
	c.requested.Add(1)
	go c.run(buildID, done)
}

// run fetches one build ID under the concurrency bound.
func (c *Client) run(buildID string, done chan struct{}) {
	c.sem <- struct{}{}
	err := c.fetch(context.Background(), buildID)
	<-c.sem
	c.mu.Lock()
	if err != nil {
		c.negative[buildID] = time.Now().Add(c.opts.NegativeTTL)
	}
	delete(c.pending, buildID)
	close(done)
	c.idle.Broadcast()
	c.mu.Unlock()
}

// Pending reports the requests queued or in flight.
func (c *Client) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Wait blocks until no request is pending or ctx ends, and reports how
// many were still pending. progress, if not nil, is called whenever the
// count changes.
func (c *Client) Wait(ctx context.Context, progress func(pending int)) int {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.idle.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	last := -1
	for len(c.pending) > 0 && ctx.Err() == nil {
		if n := len(c.pending); n != last && progress != nil {
			last = n
			c.mu.Unlock()
			progress(n)
			c.mu.Lock()
			continue
		}
		c.idle.Wait()
	}
	return len(c.pending)
}

// Stats returns the counts so far.
func (c *Client) Stats() Stats {
	return Stats{
		Requested: c.requested.Load(), Fetched: c.fetched.Load(), CacheHits: c.hits.Load(),
		Negative: c.negHits.Load(), Dropped: c.dropped.Load(), NotFound: c.notFound.Load(),
		Timeouts: c.timeouts.Load(), HTTPError: c.httpErrors.Load(), Invalid: c.invalid.Load(),
		Evicted: c.evicted.Load(), Pending: c.Pending(),
	}
}

// Fetch downloads the debug file of buildID synchronously, trying each
// server in order, and returns its cached path.
func (c *Client) Fetch(ctx context.Context, buildID string) (string, error) {
	if !validBuildID(buildID) {
		return "", fmt.Errorf("fetch debug file: bad build ID %q", buildID)
	}
	if p, ok := c.cache.get(buildID); ok {
		return p, nil
	}
	if err := c.fetch(ctx, buildID); err != nil {
		return "", err
	}
	p, ok := c.cache.get(buildID)
	if !ok {
		return "", fmt.Errorf("fetch debug file %s: evicted at once, cache bound too small", buildID)
	}
	return p, nil
}

// fetch tries the servers in order until one supplies a valid file.
func (c *Client) fetch(ctx context.Context, buildID string) error {
	var errs []error
	allNotFound := true
	for _, base := range c.opts.URLs {
		err := c.fetchFrom(ctx, base, buildID)
		if err == nil {
			c.fetched.Add(1)
			c.log.Info("fetched debug file", "build_id", buildID, "server", base)
			return nil
		}
		c.log.Warn("debuginfod fetch failed", "build_id", buildID, "server", base, "error", err)
		if !errors.Is(err, ErrNotFound) {
			allNotFound = false
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if allNotFound {
		c.notFound.Add(1)
	}
	return fmt.Errorf("fetch debug file %s: %w", buildID, errors.Join(errs...))
}

// validBuildID accepts lowercase hex of a plausible length, so a build ID
// never turns into a path outside the cache or a strange URL.
func validBuildID(id string) bool {
	if len(id) < 8 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func verifyELF(path, _ string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("parse elf: %w", err)
	}
	return f.Close()
}
