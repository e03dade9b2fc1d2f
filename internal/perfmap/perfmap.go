// Package perfmap names JIT-compiled code from the /tmp/perf-PID.map
// files that JITs (V8/Node --perf-basic-prof, the JVM with perf-map-agent,
// .NET, LuaJIT, Python 3.12 -Xperf) write: one "START SIZE name" line per
// function, START and SIZE in hex; or, for a process without one, from
// its /tmp/jit-PID.dump jitdump file (Python 3.13 -X perf_jit). Such code
// lives in anonymous executable memory that no ELF file describes.
package perfmap

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Symbol is one JIT-compiled function.
type Symbol struct {
	Start, End uint64
	Name       string
	seq        int // line number: a later line wins over an overlapping earlier one
}

// maxOverlap bounds how many earlier entries a lookup inspects, so that a
// map with many overlapping (recompiled) regions stays cheap.
const maxOverlap = 8

// Table is the parsed content of one map file, sorted by Start.
type Table struct {
	syms []Symbol
}

// Parse reads a perf map. Lines that do not parse are skipped and
// counted: JITs append while the profiler reads, so the last line may be
// partial.
func Parse(r io.Reader) (*Table, int, error) {
	var syms []Symbol
	bad := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		s, ok := parseLine(sc.Bytes())
		if !ok {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				bad++
			}
			continue
		}
		s.seq = len(syms)
		syms = append(syms, s)
	}
	if err := sc.Err(); err != nil {
		return nil, bad, fmt.Errorf("read perf map: %w", err)
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Start < syms[j].Start })
	return &Table{syms: syms}, bad, nil
}

func parseLine(line []byte) (Symbol, bool) {
	f := strings.SplitN(strings.TrimSpace(string(line)), " ", 3)
	if len(f) != 3 {
		return Symbol{}, false
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
	size, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	name := strings.TrimSpace(f[2])
	if err1 != nil || err2 != nil || size == 0 || name == "" || start+size < start {
		return Symbol{}, false
	}
	return Symbol{Start: start, End: start + size, Name: name}, true
}

// Lookup returns the function containing addr; among overlapping entries
// the one written last wins, since a JIT reuses freed code memory.
func (t *Table) Lookup(addr uint64) (Symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Start > addr })
	best := -1
	for j := i - 1; j >= 0 && j >= i-maxOverlap; j-- {
		if addr < t.syms[j].End && (best < 0 || t.syms[j].seq > t.syms[best].seq) {
			best = j
		}
	}
	if best < 0 {
		return Symbol{}, false
	}
	return t.syms[best], true
}

// Len reports the number of entries.
func (t *Table) Len() int { return len(t.syms) }

// Options configure a Cache.
type Options struct {
	// ProcRoot is normally /proc; map files are read through
	// <ProcRoot>/PID/root so that containers' /tmp is found.
	ProcRoot string
	// MaxBytes bounds how much of one map file is read; the rest is
	// ignored and counted. Default 64 MiB.
	MaxBytes int64
	// MaxProcesses bounds the tables kept. Default 1024.
	MaxProcesses int
	// MaxEntries bounds one table, entries of rewritten files kept
	// included (keep.go). Default 1<<20.
	MaxEntries int
	// Miss, when set, is called (without the cache's lock) when an
	// address of pid is in no entry even after a re-read; it returns
	// true when it had the map rewritten (jvm.PerfMapper.Refresh), and
	// the lookup then reads the file again.
	Miss func(pid uint32) bool
}

// Stats counts what the cache read.
type Stats struct {
	Reads     uint64 // map files (re)read
	BadLines  uint64 // lines that did not parse
	Truncated uint64 // files cut at MaxBytes
	Hits      uint64 // addresses named
	Kept      uint64 // entries of earlier versions of a rewritten file kept
	Exited    uint64 // files read after their process exited (Watch)
	// BadDumps counts jitdump reads that found the file malformed (its
	// header, or a record: the records before it are kept).
	BadDumps uint64
}

// Cache reads the map files of processes on demand and re-reads one when
// it changed, since JITs keep appending. Safe for concurrent use.
type Cache struct {
	opts Options

	mu      sync.Mutex
	tables  map[uint32]*entry
	watched map[uint32]*watch
	exited  map[uint32]time.Time // when Exited marked the pid
	// absent is when a pid was last found without a map file: its
	// unnamed addresses (a JIT that writes none, code of a loader) do
	// not look again for absentRecheck.
	absent map[uint32]time.Time

	reads, bad, truncated, hits, kept, exitReads, badDumps atomic.Uint64
}

type entry struct {
	size  int64
	mtime time.Time
	t     *Table
	used  time.Time
}

// New returns a Cache.
func New(opts Options) *Cache {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = 1024
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 1 << 20
	}
	return &Cache{opts: opts, tables: map[uint32]*entry{}, watched: map[uint32]*watch{}, exited: map[uint32]time.Time{},
		absent: map[uint32]time.Time{}}
}

// Stats returns the counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Reads: c.reads.Load(), BadLines: c.bad.Load(), Truncated: c.truncated.Load(), Hits: c.hits.Load(),
		Kept: c.kept.Load(), Exited: c.exitReads.Load(), BadDumps: c.badDumps.Load()}
}

// Lookup names addr in process pid. A miss re-reads the map file when it
// changed since the last read, then asks Options.Miss; after the process
// exited, the last table read keeps answering.
func (c *Cache) Lookup(pid uint32, addr uint64) (string, bool) {
	if name, ok := c.lookup(pid, addr); ok || c.opts.Miss == nil {
		return name, ok
	}
	if !c.opts.Miss(pid) {
		return "", false
	}
	c.mu.Lock()
	delete(c.absent, pid) // the map was just written
	c.mu.Unlock()
	return c.lookup(pid, addr)
}

func (c *Cache) lookup(pid uint32, addr uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.tables[pid]
	if e != nil {
		if s, ok := e.t.Lookup(addr); ok {
			e.used = time.Now()
			c.hits.Add(1)
			return s.Name, true
		}
	}
	e = c.refresh(pid, e)
	if e == nil {
		return "", false
	}
	e.used = time.Now()
	s, ok := e.t.Lookup(addr)
	if ok {
		c.hits.Add(1)
	}
	return s.Name, ok
}

// refresh re-reads the map file of pid when its size or mtime changed.
func (c *Cache) refresh(pid uint32, e *entry) *entry {
	if e == nil && c.watched[pid] == nil {
		if t, ok := c.absent[pid]; ok && time.Since(t) < absentRecheck {
			return nil
		}
	}
	mapPath := c.path(pid)
	path := mapPath
	fi, err := os.Stat(path)
	if err != nil && c.watched[pid] != nil {
		path, fi, err = c.exitedPath(pid)
	}
	if err != nil {
		// No perf map: a jitdump, which some JITs write instead
		// (CPython 3.13 -X perf_jit).
		path = dumpPath(mapPath)
		if fi, err = os.Stat(path); err != nil && c.watched[pid] != nil {
			path, fi, err = c.exitedDumpPath(pid)
		}
	}
	if err != nil || !fi.Mode().IsRegular() {
		if e == nil {
			if len(c.absent) >= c.opts.MaxProcesses {
				clear(c.absent)
			}
			c.absent[pid] = time.Now()
		}
		return e
	}
	delete(c.absent, pid)
	if e != nil && fi.Size() == e.size && fi.ModTime().Equal(e.mtime) {
		return e
	}
	f, err := os.Open(path)
	if err != nil {
		return e
	}
	defer f.Close()
	c.reads.Add(1)
	if fi.Size() > c.opts.MaxBytes {
		c.truncated.Add(1)
	}
	var t *Table
	if strings.HasSuffix(path, ".dump") {
		b, rerr := io.ReadAll(io.LimitReader(f, c.opts.MaxBytes))
		if rerr != nil {
			return e
		}
		if t, err = ParseJITDump(b); err != nil {
			c.badDumps.Add(1)
			if t == nil {
				return e
			}
		}
	} else {
		var bad int
		t, bad, err = Parse(io.LimitReader(f, c.opts.MaxBytes))
		c.bad.Add(uint64(bad))
		if err != nil {
			return e
		}
	}
	if e != nil {
		t = c.keep(t, e.t)
	}
	ne := &entry{size: fi.Size(), mtime: fi.ModTime(), t: t}
	if e == nil && len(c.tables) >= c.opts.MaxProcesses {
		c.evictOldest()
	}
	c.tables[pid] = ne
	return ne
}

func (c *Cache) evictOldest() {
	var oldest uint32
	var t time.Time
	first := true
	for pid, e := range c.tables {
		if first || e.used.Before(t) {
			oldest, t, first = pid, e.used, false
		}
	}
	delete(c.tables, oldest)
}

// Forget drops the table of an exited process.
func (c *Cache) Forget(pid uint32) {
	c.mu.Lock()
	delete(c.tables, pid)
	delete(c.watched, pid)
	delete(c.exited, pid)
	delete(c.absent, pid)
	c.mu.Unlock()
}

// absentRecheck is how long a process found without a map file is not
// looked at again: every unnamed address of such a process read its
// /proc status and stat'ed two paths, 13 % of the agent's CPU on a node
// with Chromium. A map file that appears is read within this time.
const absentRecheck = time.Second

// path is /tmp/perf-N.map inside the process's root, where N is the pid
// in the process's own namespace (the JIT writes its getpid()).
func (c *Cache) path(pid uint32) string {
	nspid := pid
	if b, err := os.ReadFile(filepath.Join(c.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10), "status")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if n, err := strconv.ParseUint(f[len(f)-1], 10, 32); err == nil {
						nspid = uint32(n)
					}
				}
			}
		}
	}
	return filepath.Join(c.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10), "root", "tmp",
		"perf-"+strconv.FormatUint(uint64(nspid), 10)+".map")
}
