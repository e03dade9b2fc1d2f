// Package symbolize turns instruction addresses into function names: ELF
// symbol tables (with separate debug files), Go pclntab and the kernel's
// kallsyms. Parsed files are cached by GNU build ID, so a library mapped
// by a hundred processes is read once.
package symbolize

import (
	"container/list"
	"debug/elf"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spanprof/spanprof/internal/gopclntab"
)

// Options configures a Symbolizer.
type Options struct {
	// MaxObjects bounds the parsed-object cache; the least recently used
	// object is evicted first. Zero means 256.
	MaxObjects int
	// MaxBytes bounds the estimated memory of the cached objects as well
	// (a Go binary's pclntab alone is megabytes); the most recent object
	// always stays. Zero means 64 MiB.
	MaxBytes int64
	// DebugDirs are searched for separate debug files of stripped
	// binaries. Nil means /usr/lib/debug.
	DebugDirs []string
	// Fetcher, when set, fetches debug files that no debug directory
	// holds (debuginfod, ModeFull).
	Fetcher DebugFetcher
	// Mode ModeNone skips DWARF line tables, which nobody will read.
	Mode Mode
	// DWARFSpillDir, when set, keeps compressed DWARF decompressed in
	// files there, so that Trim can release it from memory and a later
	// lookup reads it back instead of inflating it again. Empty keeps
	// none: the debug file is inflated on every load.
	DWARFSpillDir string
	// DWARFSpillBytes bounds the files in DWARFSpillDir; the least
	// recently used go first. Zero means 256 MiB.
	DWARFSpillBytes int64
	// IdleTimeout drops, at the next Trim, objects no lookup opened for
	// that long, so that the tables of programs that came and went (a
	// compiler run, a batch job) do not stay until the bounds push them
	// out. Zero means DefaultIdleTimeout; negative keeps them.
	IdleTimeout time.Duration
	// Now is the clock of IdleTimeout; nil means time.Now.
	Now func() time.Time
	// Pclntabs, when set, shares Go pclntabs with other caches of the
	// same binaries (the unwind tables); nil gives the Symbolizer a store
	// of its own, which Pclntabs returns.
	Pclntabs *gopclntab.Store
}

// DefaultIdleTimeout is how long a parsed object stays unused before Trim
// drops it: a few reports' worth, so a program sampled now and then keeps
// its tables, while one that exited gives them back within minutes.
const DefaultIdleTimeout = 5 * time.Minute

// Mode says how much symbolization happens on this machine.
type Mode int

const (
	// ModeLocal uses the binaries and local debug directories (default).
	ModeLocal Mode = iota
	// ModeNone leaves user frames as module+offset with build IDs, for
	// backends that symbolize themselves.
	ModeNone
	// ModeFull adds debug files fetched from debuginfod servers.
	ModeFull
)

// ParseMode parses the --symbolize flag value.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "local", "":
		return ModeLocal, nil
	case "none":
		return ModeNone, nil
	case "full":
		return ModeFull, nil
	}
	return 0, fmt.Errorf("parse symbolization mode %q: want none, local or full", s)
}

// ResolveMode is ParseMode with the default chosen for the user: an
// empty s (no mode asked for) is full when debuginfod servers are
// configured, since a user who set DEBUGINFOD_URLS expects them used, as
// elfutils' tools and gdb use them, and local otherwise. An explicit
// "local" stays offline.
func ResolveMode(s string, debuginfod bool) (Mode, error) {
	if s == "" && debuginfod {
		return ModeFull, nil
	}
	return ParseMode(s)
}

// String returns the flag spelling of the mode.
func (m Mode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModeFull:
		return "full"
	}
	return "local"
}

// Symbolizer is shared by all processes. Its methods are safe for
// concurrent use.
type Symbolizer struct {
	log  *slog.Logger
	opts Options

	// pcln holds the Go pclntabs of the cached objects; what it is
	// charged counts towards MaxBytes.
	pcln *gopclntab.Holder

	mu      sync.Mutex
	objects *lru[string, *objectEntry]   // object key → parsed object
	files   *lru[fileStat, fileIdentity] // file version → identity

	bytes int64 // sum of the cached entries' size
	stats stats
}

// objectEntry lets concurrent openers of one build ID wait for one parse:
// the opener that created the entry parses and closes done.
type objectEntry struct {
	key  string
	done chan struct{}
	obj  *Object
	err  error
	// size is the object's estimated memory once parsed, without the
	// shared pclntab; evicted is set when the entry left the cache;
	// claimed while the entry holds a claim on its object's pclntab;
	// used is when Open last returned it. All are guarded by
	// Symbolizer.mu.
	size    int64
	evicted bool
	claimed bool
	used    time.Time
}

// fileIdentity is what Open learnt about one file version.
type fileIdentity struct {
	id  Identity
	key string
}

// New returns a Symbolizer.
func New(log *slog.Logger, opts Options) *Symbolizer {
	if opts.MaxObjects <= 0 {
		opts.MaxObjects = 256
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.DWARFSpillBytes <= 0 {
		opts.DWARFSpillBytes = 256 << 20
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{"/usr/lib/debug"}
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
	return &Symbolizer{
		log:     log,
		opts:    opts,
		pcln:    opts.Pclntabs.Holder(),
		objects: newLRU[string, *objectEntry](opts.MaxObjects),
		files:   newLRU[fileStat, fileIdentity](4 * opts.MaxObjects),
	}
}

// fileStat tells one version of a file apart without reading it.
type fileStat struct {
	dev, ino, size uint64
	mtime          int64
}

func statFile(path string) (fileStat, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStat{}, fmt.Errorf("stat %s: %w", path, err)
	}
	st := fileStat{size: uint64(fi.Size()), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = sys.Dev, sys.Ino
	}
	return st, nil
}

// Open returns the parsed object of the ELF file at openPath, a path the
// agent can read (such as /proc/PID/root/usr/lib/libc.so.6 or
// /proc/PID/map_files/START-END). displayPath is the path as the process
// sees it, used in logs, debug-file lookup and the no-build-ID cache key.
//
// Objects are cached by GNU build ID, or, for files without one, by
// displayPath, size and mtime; a file version already seen is recognized
// by a stat alone.
func (s *Symbolizer) Open(openPath, displayPath string) (*Object, error) {
	st, err := statFile(openPath)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if fid, ok := s.files.get(st); ok {
		if e, ok := s.objects.get(fid.key); ok {
			e.used = s.opts.Now()
			s.mu.Unlock()
			<-e.done
			if !s.debugArrived(e) {
				return e.obj, e.err
			}
		} else {
			s.mu.Unlock()
		}
	} else {
		s.mu.Unlock()
	}

	f, err := os.Open(openPath)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", openPath, err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("parse elf %s: %w", displayPath, err)
	}
	id, err := identify(ef, f, int64(st.size))
	if err != nil {
		return nil, fmt.Errorf("identify %s: %w", displayPath, err)
	}
	key := id.Key()
	if id.BuildID == "" {
		key = "path:" + displayPath + ":" + strconv.FormatUint(st.size, 10) + ":" + strconv.FormatInt(st.mtime, 10)
	}

	s.mu.Lock()
	s.files.put(st, fileIdentity{id: id, key: key})
	e, ok := s.objects.get(key)
	if ok {
		e.used = s.opts.Now()
		s.mu.Unlock()
		<-e.done
		if !s.debugArrived(e) {
			return e.obj, e.err
		}
		s.mu.Lock()
		// Replace the entry unless a concurrent opener already did.
		if cur, ok := s.objects.get(key); ok && cur != e {
			s.mu.Unlock()
			<-cur.done
			return cur.obj, cur.err
		}
	}
	if old, ok := s.objects.get(key); ok {
		s.dropLocked(old, false)
	}
	e = &objectEntry{key: key, done: make(chan struct{}), used: s.opts.Now()}
	if ev, evicted := s.objects.put(key, e); evicted {
		s.dropLocked(ev.val, false)
		s.log.Debug("evict symbol table", "key", ev.key)
	}
	s.mu.Unlock()

	e.obj, e.err = s.parse(ef, st, id, key, openPath, displayPath)
	s.mu.Lock()
	switch {
	case e.obj == nil:
	case e.evicted:
		// Dropped while parsing: the claim goes at once.
		if e.obj.gotab != nil {
			s.pcln.Release(key)
		}
	default:
		e.claimed = e.obj.gotab != nil
		e.size = e.obj.size()
		s.bytes += e.size
		s.boundLocked()
	}
	s.mu.Unlock()
	close(e.done)
	if e.err != nil {
		s.log.Debug("parse object", "path", displayPath, "err", e.err)
		return nil, e.err
	}
	s.log.Debug("parsed object", "path", displayPath, "key", key,
		"symbols", e.obj.NumSymbols(), "go", e.obj.IsGo())
	return e.obj, nil
}

// Parsed reports whether Open of openPath would return without parsing:
// the file version was seen and its object (or the error of its parse) is
// cached, not being parsed, and waits for no debug file that arrived
// since. A file that cannot be stat'ed is reported parsed: Open fails on
// it at once. It neither parses nor changes what the cache keeps first,
// so a caller bounding the parses of a batch (collect.Options.ParseBytes)
// can leave a binary for a later batch.
func (s *Symbolizer) Parsed(openPath string) bool {
	st, err := statFile(openPath)
	if err != nil {
		return true
	}
	s.mu.Lock()
	fid, ok := s.files.vals[st]
	var e *objectEntry
	if ok {
		e, ok = s.objects.vals[fid.key]
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-e.done:
	default:
		return false
	}
	return !s.debugArrived(e)
}

// dropLocked accounts for an entry leaving the cache, idle or pushed out.
func (s *Symbolizer) dropLocked(e *objectEntry, idle bool) {
	if e.evicted {
		return
	}
	e.evicted = true
	s.bytes -= e.size
	if e.claimed {
		e.claimed = false
		s.pcln.Release(e.key)
	}
	if idle {
		s.stats.expired.Add(1)
	} else {
		s.stats.evicted.Add(1)
	}
}

// boundLocked evicts the least recently used objects over MaxBytes,
// counting the pclntabs the Symbolizer pays for; the most recent stays.
func (s *Symbolizer) boundLocked() {
	for s.bytes+s.pcln.Charged() > s.opts.MaxBytes && s.objects.len() > 1 {
		ev := s.objects.removeOldest()
		s.dropLocked(ev.val, false)
		s.log.Debug("evict symbol table over the byte bound", "key", ev.key)
	}
}

// expireLocked drops the objects Open has not returned for IdleTimeout.
// The LRU's order is that of use, so they are all at its back.
func (s *Symbolizer) expireLocked() {
	if s.opts.IdleTimeout < 0 {
		return
	}
	cutoff := s.opts.Now().Add(-s.opts.IdleTimeout)
	for el := s.objects.order.Back(); el != nil; el = s.objects.order.Back() {
		k := el.Value.(string)
		e := s.objects.vals[k]
		if !e.used.Before(cutoff) {
			return
		}
		s.objects.removeOldest()
		s.dropLocked(e, true)
		s.log.Debug("drop idle symbol table", "key", k, "idle", s.opts.Now().Sub(e.used))
	}
}

// Trim releases the DWARF section data that lookups loaded, keeping the
// tables built from it, drops the objects idle for IdleTimeout, and
// accounts for what the objects hold now, evicting the least recently
// used over MaxBytes. Call it after a batch of lookups (the agent does
// after every report): the next batch loads the data again only for
// compile units it has not seen.
func (s *Symbolizer) Trim() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for el := s.objects.order.Front(); el != nil; el = el.Next() {
		e := s.objects.vals[el.Value.(string)]
		select {
		case <-e.done:
		default:
			continue // still being parsed; accounted when done
		}
		if e.obj == nil || e.evicted {
			continue
		}
		e.obj.dwarf.trim()
		if e.obj.syms != nil {
			e.obj.syms.dropPages()
		}
		n := e.obj.size()
		s.bytes += n - e.size
		e.size = n
	}
	s.expireLocked()
	// The pages of mapped pclntabs that this batch's lookups touched.
	s.opts.Pclntabs.DropPages()
	// Also after nothing was parsed: another holder may have passed the
	// charge of a shared pclntab on to this one.
	s.boundLocked()
}

// Bytes reports the estimated memory of the cached objects, counting the
// Go pclntabs shared with other holders (Options.Pclntabs) only when
// the Symbolizer pays for them.
func (s *Symbolizer) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes + s.pcln.Charged()
}

// Pclntabs returns the store the Symbolizer keeps Go pclntabs in, for
// other caches of the same binaries to share (unwind.CacheOptions).
func (s *Symbolizer) Pclntabs() *gopclntab.Store { return s.opts.Pclntabs }

// debugArrived reports whether the object of e waited for a debug file
// that the fetcher now has, so it is worth parsing again.
func (s *Symbolizer) debugArrived(e *objectEntry) bool {
	if e.err != nil || e.obj == nil || !e.obj.awaitingDebug || s.opts.Fetcher == nil {
		return false
	}
	_, ok := s.opts.Fetcher.Cached(e.obj.id.BuildID)
	return ok
}

// Identify returns the identity of the file at openPath without parsing
// its tables (ModeNone needs only the build ID); a file version seen
// before costs a stat.
func (s *Symbolizer) Identify(openPath string) (Identity, error) {
	st, err := statFile(openPath)
	if err != nil {
		return Identity{}, err
	}
	s.mu.Lock()
	fid, ok := s.files.get(st)
	s.mu.Unlock()
	if ok {
		return fid.id, nil
	}
	return Identify(openPath)
}

// Len reports how many objects are cached.
func (s *Symbolizer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects.len()
}

// lru is a map bounded by count that evicts the least recently used key.
type lru[K comparable, V any] struct {
	max   int
	order *list.List // front is most recent; values are K
	items map[K]*list.Element
	vals  map[K]V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, order: list.New(), items: map[K]*list.Element{}, vals: map[K]V{}}
}

func (l *lru[K, V]) get(k K) (V, bool) {
	el, ok := l.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(el)
	return l.vals[k], true
}

// lruItem is an evicted key and its value.
type lruItem[K comparable, V any] struct {
	key K
	val V
}

// put inserts or replaces k and returns the evicted item, if any.
func (l *lru[K, V]) put(k K, v V) (evicted lruItem[K, V], ok bool) {
	if el, exists := l.items[k]; exists {
		l.order.MoveToFront(el)
		l.vals[k] = v
		return evicted, false
	}
	l.items[k] = l.order.PushFront(k)
	l.vals[k] = v
	if l.order.Len() <= l.max {
		return evicted, false
	}
	return l.removeOldest(), true
}

// removeOldest evicts the least recently used item; the list is not empty.
func (l *lru[K, V]) removeOldest() lruItem[K, V] {
	back := l.order.Back()
	k := back.Value.(K)
	it := lruItem[K, V]{k, l.vals[k]}
	l.order.Remove(back)
	delete(l.items, k)
	delete(l.vals, k)
	return it
}

func (l *lru[K, V]) len() int { return l.order.Len() }
