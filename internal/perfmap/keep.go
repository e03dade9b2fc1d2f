package perfmap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// keep merges the previous table into a re-read one. Node appends to its
// map, but HotSpot rewrites the whole file from its code cache each time
// it is asked, so code freed since (a method recompiled at a higher tier,
// a flushed blob) is missing from the new file while samples taken
// earlier still point at it. Old entries that no new entry overlaps are
// kept, below every new one: where memory was reused, the new entry
// wins.
func (c *Cache) keep(t, old *Table) *Table {
	n := len(t.syms)
	maxEnd := make([]uint64, n)
	for i, s := range t.syms {
		maxEnd[i] = s.End
		if i > 0 && maxEnd[i-1] > s.End {
			maxEnd[i] = maxEnd[i-1]
		}
	}
	var kept []Symbol
	for _, o := range old.syms {
		// The new entries starting before o ends; o overlaps one of them
		// if any ends after o starts.
		i := sort.Search(n, func(i int) bool { return t.syms[i].Start >= o.End })
		if i > 0 && maxEnd[i-1] > o.Start {
			continue
		}
		kept = append(kept, o)
	}
	if len(kept) == 0 {
		return t
	}
	// Bound the table: the oldest kept entries go first.
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].seq < kept[j].seq })
	if room := c.opts.MaxEntries - n; len(kept) > room {
		kept = kept[len(kept)-max(room, 0):]
	}
	for i := range kept {
		kept[i].seq = i
	}
	syms := make([]Symbol, 0, len(kept)+n)
	syms = append(syms, kept...)
	for _, s := range t.syms {
		s.seq += len(kept)
		syms = append(syms, s)
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Start < syms[j].Start })
	c.kept.Add(uint64(len(kept)))
	return &Table{syms: syms}
}

// watch is what the cache knows of a live process so that its map can
// still be read after it exited, when /proc/PID/root is gone.
type watch struct {
	hostPath string    // the map's path here; "" if the process had another mount namespace
	start    time.Time // when the process started: older files are another's
}

// Watch notes where pid's map file is from this mount namespace, so that
// a process that exits before its samples are symbolized keeps its JIT
// names (the file stays in /tmp; only /proc/PID/root goes). Cheap and
// idempotent; call it when a process is first seen.
func (c *Cache) Watch(pid uint32) {
	c.mu.Lock()
	_, seen := c.watched[pid]
	c.mu.Unlock()
	if seen {
		return
	}
	dir := filepath.Join(c.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	w := &watch{start: processStart(c.opts.ProcRoot, dir)}
	self, err1 := os.Readlink(filepath.Join(c.opts.ProcRoot, "self", "ns", "mnt"))
	theirs, err2 := os.Readlink(filepath.Join(dir, "ns", "mnt"))
	if err1 == nil && err2 == nil && self == theirs && !w.start.IsZero() {
		p := c.path(pid)
		w.hostPath = filepath.Join("/tmp", filepath.Base(p))
	}
	c.mu.Lock()
	c.watched[pid] = w
	c.mu.Unlock()
}

var errNoPath = errors.New("no map path for an exited process")

// exitedPath is the map file of a watched process that has exited.
func (c *Cache) exitedPath(pid uint32) (string, os.FileInfo, error) {
	w := c.watched[pid]
	if w.hostPath == "" {
		return "", nil, errNoPath
	}
	if _, err := os.Stat(filepath.Join(c.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10), "root", "tmp")); err == nil {
		return "", nil, errNoPath // alive: its own root was right
	}
	// Gone, or a zombie not yet reaped, whose root is gone already.
	fi, err := os.Stat(w.hostPath)
	if err != nil {
		return "", nil, err
	}
	// A file older than the process is a stale one of an earlier process
	// with the same pid (/tmp/perf-*.map files are never removed).
	if fi.ModTime().Before(w.start.Add(-2 * time.Second)) {
		return "", nil, errNoPath
	}
	c.exitReads.Add(1)
	return w.hostPath, fi, nil
}

// dumpPath is the jitdump file beside a perf map: /tmp/jit-N.dump for
// /tmp/perf-N.map.
func dumpPath(mapPath string) string {
	dir, base := filepath.Split(mapPath)
	return dir + "jit-" + strings.TrimSuffix(strings.TrimPrefix(base, "perf-"), ".map") + ".dump"
}

// exitedDumpPath is exitedPath for the jitdump of a watched process.
func (c *Cache) exitedDumpPath(pid uint32) (string, os.FileInfo, error) {
	w := c.watched[pid]
	if w.hostPath == "" {
		return "", nil, errNoPath
	}
	saved := *w
	w.hostPath = dumpPath(w.hostPath)
	path, fi, err := c.exitedPath(pid)
	*w = saved
	return path, fi, err
}

// Load reads pid's map file now if it changed, as a JIT that rewrites it
// (jvm.PerfMapper) wants before the next version replaces this one.
func (c *Cache) Load(pid uint32) {
	c.mu.Lock()
	c.refresh(pid, c.tables[pid])
	c.mu.Unlock()
}

// Exited marks pid as exited: its table keeps answering until
// ForgetExited, so that samples symbolized after the exit keep names.
func (c *Cache) Exited(pid uint32) {
	c.mu.Lock()
	c.exited[pid] = time.Now()
	c.mu.Unlock()
}

// ForgetExited drops the tables of processes marked by Exited before
// before; call it after the samples of the interval were symbolized.
func (c *Cache) ForgetExited(before time.Time) {
	c.mu.Lock()
	for pid, at := range c.exited {
		if at.After(before) {
			continue
		}
		delete(c.tables, pid)
		delete(c.watched, pid)
		delete(c.exited, pid)
	}
	c.mu.Unlock()
}

// processStart is when the process of dir started, from its stat start
// time (clock ticks since boot, USER_HZ 100 on Linux) and the boot time.
func processStart(procRoot, dir string) time.Time {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return time.Time{}
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return time.Time{}
	}
	all, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return time.Time{}
	}
	for _, l := range bytes.Split(all, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(l, []byte("btime ")); ok {
			bt, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.Unix(bt, 0).Add(time.Duration(ticks) * 10 * time.Millisecond)
		}
	}
	return time.Time{}
}
