package proc

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is what the tracker knows of one process.
type Process struct {
	// readAt is when procfs was read, to tell a stale exec report.
	readAt time.Time
	// execAt is the time of the exec that made this image (zero when it
	// predates the tracker), to tell mappings captured at the exit of an
	// earlier process of the same pid.
	execAt time.Time
	// execReread: the mappings were read again after the exec's first
	// read (RereadAfterExec), which came before the loader mapped the
	// libraries.
	execReread bool
	// gen names the image (hold.go): copies of it keep it.
	gen uint32
	// forkOf is the parent this entry was copied from at a fork (Fork),
	// 0 for an entry read or placed for the pid itself.
	forkOf uint32

	PID      uint32
	Exe      string // path of the executable as the process sees it
	Comm     string
	Mappings []Mapping // sorted by Start
	// Files opened at first sight, keyed by mapping start, so the files
	// stay readable after the process exits or the file is replaced.
	Files       map[uint64]*os.File
	ContainerID string
	PodUID      string
	Exited      bool
	// exitedAt is when its exit event was handled (Exit); zero for a
	// process found gone otherwise.
	exitedAt time.Time
	// Partial: the mappings are the executable's and the loader's only,
	// placed from the exec image of a process gone before it could be
	// read; its libraries are missing until its exit capture adds them.
	Partial bool
	// Env holds the few environment variables spanprof reads
	// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
	Env map[string]string
}

// Find returns the mapping containing addr, or nil.
func (p *Process) Find(addr uint64) *Mapping {
	ms := p.Mappings
	i := sort.Search(len(ms), func(i int) bool { return ms[i].End > addr })
	if i < len(ms) && ms[i].Start <= addr {
		return &ms[i]
	}
	return nil
}

// OpenPath returns a path the agent can open for a mapping's file: the
// handle taken at first sight when there is one.
func (p *Process) OpenPath(m *Mapping) string {
	if f, ok := p.Files[m.Start]; ok {
		return fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	return filepath.Join("/proc", fmt.Sprint(p.PID), "root", m.Path)
}

// Tracker reads and caches process metadata from procfs.
type Tracker struct {
	root string
	log  *slog.Logger

	mu    sync.Mutex
	procs map[uint32]*Process
	// files shares one handle per mapped file among the processes mapping
	// it: under process churn (thousands of short-lived processes of the
	// same binary kept until the next report) a handle per process and
	// mapping would exhaust RLIMIT_NOFILE.
	files map[fileKey]*sharedFile
	keys  map[*os.File]fileKey
	// synthesized counts processes placed from their exec image.
	synthesized int
	// forked counts pids taken by a fork after their process's exit.
	forked    int
	refreshed int
	exitStats ExitStats
	// buf holds one procfs file at a time while read parses it (under
	// mu): thousands of processes a second are read under churn, and
	// only what is kept of them should allocate.
	buf bytes.Buffer
	// gens numbers the images (newGen); held are those consumers hold,
	// by generation (Hold).
	gens uint32
	held map[uint32]*held
	// snaps are the last reads' snapshots for the trace-context scanner.
	snaps snapshots
}

// fileKey names a file by the device and inode /proc/PID/maps shows. While
// a handle is open the inode cannot be reused, so the key stays unique.
type fileKey struct {
	dev   string
	inode uint64
}

type sharedFile struct {
	f    *os.File
	refs int
	hdr  *elfHeader // parsed at the first exec placed from it
}

// NewTracker returns a tracker reading from procRoot (normally "/proc").
func NewTracker(procRoot string, log *slog.Logger) *Tracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tracker{root: procRoot, log: log, procs: map[uint32]*Process{}, held: map[uint32]*held{}, files: map[fileKey]*sharedFile{}, keys: map[*os.File]fileKey{}}
}

// Get returns the process, reading it from procfs at first sight. It
// returns nil when the process is gone before it could be read.
func (t *Tracker) Get(pid uint32) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(pid)
}

// get is Get for callers holding t.mu.
func (t *Tracker) get(pid uint32) *Process {
	if p, ok := t.procs[pid]; ok {
		return p
	}
	p, err := t.read(pid)
	if err != nil {
		t.log.Debug("read process", "pid", pid, "error", err)
		// Remember the failure so a vanished process costs one read.
		p = &Process{PID: pid, Exited: true}
	}
	p.readAt = time.Now()
	p.gen = t.newGen()
	t.procs[pid] = p
	return p
}

// Exec reads pid, whose image changed at time at, and applies the read
// (ReadExec, ApplyExec), for a caller with no reader ahead of it. A
// process already read after at is kept without a read, so a second report
// of one exec costs nothing.
func (t *Tracker) Exec(pid uint32, at time.Time, img *Image) {
	t.mu.Lock()
	readAfter := t.readAfterExec(pid, at)
	t.mu.Unlock()
	if !readAfter {
		t.ApplyExec(pid, at, t.ReadExec(pid, at, img))
	}
}

// Current returns the entry of pid for a sample handed over in stream
// order, reading the process at first sight like Get: every exec, exit and
// fork before the sample in the stream has been applied, so the entry is
// the image the sample ran in.
func (t *Tracker) Current(pid uint32) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(pid)
}

// Fork makes pid, a new process forked by parent at time at, the pid's
// entry, in stream order: a copy of the parent's entry, whose image the
// child shares until it execs, or none when the parent is not known live
// (the child is then read at its first sample). An entry of an earlier
// process of the pid is retired (kept while samples hold it) and counted
// in Forked when it had exited: the pid was taken by a new process after
// its process's exit, which only this event tells apart.
func (t *Tracker) Fork(pid, parent uint32, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.procs[pid]; ok {
		if cur.Exited {
			t.forked++
		}
		delete(t.procs, pid)
		t.retire(cur)
	}
	pp, ok := t.procs[parent]
	if !ok || pp.Exited {
		return
	}
	c := *pp
	c.PID, c.forkOf = pid, parent
	// The image began here for this pid: an exec after it replaces it,
	// and an exit capture before it is an earlier process's.
	c.readAt, c.execAt = at, at
	c.Files = make(map[uint64]*os.File, len(pp.Files))
	for start, f := range pp.Files {
		// Shared handles gain a reference; one the parent uses alone (a
		// file replaced since it was mapped) is not the child's to close.
		if k, ok := t.keys[f]; ok {
			t.files[k].refs++
			c.Files[start] = f
		}
	}
	c.gen = t.newGen()
	t.procs[pid] = &c
}

// Refresh re-reads the mappings of pid, a live process read at least
// minAge ago, and adds those that overlap none it has: the libraries it
// mapped after it was first read (dlopen, a plugin, an interpreter's
// extension module). An address in none of its mappings is how the caller
// finds out that a re-read may help. Exited processes, and processes read
// less than minAge ago, are returned as they are, so addresses that are no
// code at all (a broken frame chain) cost one re-read per minAge. Mappings
// are only added, never dropped, and the process is replaced, not changed
// in place: a *Process handed out earlier stays as it was, and so do the
// files it names.
func (t *Tracker) Refresh(pid uint32, minAge time.Duration) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refresh(pid, minAge)
}

// refresh is Refresh for callers holding t.mu.
func (t *Tracker) refresh(pid uint32, minAge time.Duration) *Process {
	old, ok := t.procs[pid]
	if !ok || old.Exited || time.Since(old.readAt) < minAge {
		return old
	}
	np := *old
	np.readAt = time.Now()
	cur, err := t.read(pid)
	if err != nil || cur.Exited {
		// Gone since: what was read before is all there is.
		np.Exited = err != nil
		if cur != nil {
			t.release(cur)
		}
		t.procs[pid] = &np
		return &np
	}
	rp, added, _ := np.withMappings(cur.Mappings, func(m *Mapping) (*os.File, bool) {
		f, ok := cur.Files[m.Start]
		if ok {
			delete(cur.Files, m.Start) // the new read's reference moves over
		}
		return f, true
	})
	t.release(cur) // references to files old already holds
	if added > 0 {
		t.refreshed++
	}
	t.procs[pid] = rp
	return rp
}

// Refreshed counts the re-reads of Refresh that found new mappings.
func (t *Tracker) Refreshed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refreshed
}

// Exit marks pid's entry as exited at time at (zero: now unknown); its
// mappings stay for symbolization until ForgetExited. It is applied in
// stream order: the entry is the process that exited, unless it was read
// after a later exec (its first sight came late), which keeps its image.
func (t *Tracker) Exit(pid uint32, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[pid]
	if !ok || !at.IsZero() && p.execAt.After(at) {
		return
	}
	p.Exited, p.exitedAt = true, time.Now()
}

// ForgetExited drops the processes whose exit was handled before before
// (or that were found gone otherwise), closing their files unless their
// images are held (Hold). The agent calls it after each report, with the
// report's start less a grace: the samples of threads that outlive their
// leader's exit event follow it in the stream, and may be handled after
// the report.
func (t *Tracker) ForgetExited(before time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, p := range t.procs {
		if p.Exited && !p.exitedAt.After(before) {
			t.retire(p)
			delete(t.procs, pid)
		}
	}
	t.snaps.expire(time.Now())
}

// Stats are the tracker's counters, read together.
type Stats struct {
	// Tracked is the number of processes tracked (Len).
	Tracked int
	// Synthesized counts the processes placed from their exec image
	// because they were gone before procfs could be read.
	Synthesized int
	// Forked counts the pids taken by a new process (Fork) after the
	// pid's process exited.
	Forked int
	// Exits is what the mappings captured at exits added.
	Exits ExitStats
}

// Stats returns the tracker's counters, taken once under its lock.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Tracked: len(t.procs), Synthesized: t.synthesized, Forked: t.forked, Exits: t.exitStats}
}

// Len returns the number of processes tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.procs)
}

// Close releases every open file.
func (t *Tracker) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, p := range t.procs {
		t.release(p)
		delete(t.procs, pid)
	}
	for gen, h := range t.held {
		if h.retired != nil {
			t.release(h.retired)
		}
		delete(t.held, gen)
	}
	// Reads of execs never applied (their events still queued when the
	// sampler closed) hold the rest.
	for k, sf := range t.files {
		sf.f.Close()
		delete(t.files, k)
		delete(t.keys, sf.f)
	}
}

// release drops p's references to its files, closing those no other
// process maps. Callers hold t.mu.
func (t *Tracker) release(p *Process) {
	for _, f := range p.Files {
		t.unref(f)
	}
	p.Files = nil
}

func (t *Tracker) unref(f *os.File) {
	k, ok := t.keys[f]
	if !ok {
		f.Close() // not shared
		return
	}
	sf := t.files[k]
	if sf.refs--; sf.refs == 0 {
		sf.f.Close()
		delete(t.files, k)
		delete(t.keys, f)
	}
}

// OpenFiles returns the number of file handles the tracker holds.
func (t *Tracker) OpenFiles() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.files)
}

// open returns a handle of the file mapped at m, shared with the other
// processes mapping the same file. Callers hold t.mu.
func (t *Tracker) open(dir string, m *Mapping) (*os.File, bool) {
	key := fileKey{dev: m.Dev, inode: m.Inode}
	if f, ok := t.hold(key); ok {
		return f, true
	}
	fh, err := os.Open(filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", m.Start, m.End)))
	if err != nil {
		fh, err = os.Open(filepath.Join(dir, "root", m.Path))
	}
	if err != nil {
		return nil, false
	}
	// Share only a handle that is the mapped inode: the fallback path may
	// name a file replaced since the mapping was made. Another is used by
	// this process alone.
	t.share(key, fh)
	return fh, true
}

// hold returns the shared handle of key with one more reference. Callers
// hold t.mu.
func (t *Tracker) hold(key fileKey) (*os.File, bool) {
	sf, ok := t.files[key]
	if !ok {
		return nil, false
	}
	sf.refs++
	return sf.f, true
}

// share makes fh the shared handle of key, with one reference, when it is
// that inode; it reports whether it was. Callers hold t.mu.
func (t *Tracker) share(key fileKey, fh *os.File) bool {
	st, err := fh.Stat()
	if err != nil {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Ino != key.inode {
		return false
	}
	t.files[key] = &sharedFile{f: fh, refs: 1}
	t.keys[fh] = key
	return true
}

func (t *Tracker) read(pid uint32) (*Process, error) {
	dir := filepath.Join(t.root, strconv.FormatUint(uint64(pid), 10))
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	defer d.close()
	b, err := t.readFile(d, "maps")
	if err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	ms, err := parseMaps(b)
	if err != nil {
		return nil, err
	}
	p := &Process{PID: pid, Mappings: ms, Files: map[uint64]*os.File{}}
	snap := t.snapshot(pid, d, b)
	p.Exe, _ = d.readlink("exe")
	if len(ms) == 0 && p.Exe == "" {
		// A zombie (exited, not yet reaped: empty maps, no exe) or a
		// kernel thread: nothing in user space to symbolize. Marked exited
		// so it is forgotten after the next report rather than kept as a
		// live process without mappings.
		p.Exited = true
	}
	if b, err := t.readFile(d, "stat"); err == nil {
		st := parseStat(b)
		p.Comm = st.comm
		if st.exiting {
			// Its exit may have been reported already, before this read
			// (a sample handed over after the exit event): no exit will
			// come to mark it, so it is marked now, its mappings kept.
			p.Exited = true
		}
	}
	if b, err := t.readFile(d, "cgroup"); err == nil {
		p.ContainerID, p.PodUID = ParseCgroup(string(b))
	}
	if b, err := t.readFile(d, "environ"); err == nil {
		p.Env = parseEnviron(b, "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
		snap.Environ = otelEnviron(b)
	} else {
		snap.EnvErr = err
	}
	// Open each file once through map_files, which works for deleted and
	// replaced files too; fall back to the path under the process root.
	for i := range ms {
		m := &ms[i]
		if m.Anonymous() || strings.HasPrefix(m.Path, "[") {
			continue
		}
		if _, dup := p.Files[m.Start]; dup {
			continue
		}
		if fh, ok := t.open(dir, m); ok {
			p.Files[m.Start] = fh
		}
	}
	t.snaps.put(snap)
	return p, nil
}

// maxProcFile bounds what readFile takes of one procfs file: the maps of
// the largest processes run to megabytes, an environment to 2 MiB.
const maxProcFile = 64 << 20

// readFile reads the procfs file name of d into t.buf, which the next call
// reuses. Callers hold t.mu.
func (t *Tracker) readFile(d procDir, name string) ([]byte, error) {
	fd, err := d.open(name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	t.buf.Reset()
	if _, err := t.buf.ReadFrom(io.LimitReader(fdReader(fd), maxProcFile+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if t.buf.Len() > maxProcFile {
		return nil, fmt.Errorf("read %s: larger than %d bytes", name, maxProcFile)
	}
	b := t.buf.Bytes()
	// A buffer grown for one huge process is not kept for the next.
	if t.buf.Cap() > 1<<20 {
		t.buf = bytes.Buffer{}
	}
	return b, nil
}

// pfExiting is the kernel's PF_EXITING task flag: set by do_exit before
// the exit tracepoint fires.
const pfExiting = 0x4

// procStat is what the tracker takes of /proc/PID/stat.
type procStat struct {
	comm string // the command name, as /proc/PID/comm shows it
	// exiting: the process is in do_exit (PF_EXITING in the flags, field
	// 9) or already a zombie.
	exiting bool
}

// parseStat reads /proc/PID/stat text. The command name lies between the
// first '(' and the last ')', since it may hold spaces and parentheses
// itself; the fields after it are split once.
func parseStat(stat []byte) procStat {
	var st procStat
	i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if j < 0 {
		return st
	}
	if i >= 0 && i < j {
		st.comm = string(stat[i+1 : j])
	}
	f := strings.Fields(string(stat[j+1:])) // f[0] is field 3
	if len(f) >= 7 {
		flags, err := strconv.ParseUint(f[6], 10, 64)
		st.exiting = f[0] == "Z" || f[0] == "X" || err == nil && flags&pfExiting != 0
	}
	return st
}

var (
	containerIDRe = regexp.MustCompile(`([0-9a-f]{64})(?:\.scope)?$`)
	podUIDRe      = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
)

// ParseCgroup extracts a container id and a Kubernetes pod UID from the
// text of /proc/PID/cgroup.
func ParseCgroup(text string) (containerID, podUID string) {
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		if m := podUIDRe.FindStringSubmatch(path); m != nil && podUID == "" {
			podUID = strings.ReplaceAll(m[1], "_", "-")
		}
		last := path[strings.LastIndex(path, "/")+1:]
		if m := containerIDRe.FindStringSubmatch(last); m != nil && containerID == "" {
			containerID = m[1]
		}
	}
	return containerID, podUID
}

func parseEnviron(b []byte, keys ...string) map[string]string {
	out := map[string]string{}
	for len(b) > 0 {
		var kv []byte
		kv, b, _ = bytes.Cut(b, []byte{0})
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		for _, want := range keys {
			if string(k) == want {
				out[want] = string(v)
			}
		}
	}
	return out
}
