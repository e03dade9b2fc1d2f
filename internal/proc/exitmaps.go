package proc

import (
	"cmp"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// ExitStats counts what the mappings captured at exits added.
type ExitStats struct {
	// Processes that gained mappings from their exit capture.
	Processes int
	// Mappings added: libraries mapped after the exec, the vDSO.
	Mappings int
	// NoFile counts file mappings left out because no file with the
	// captured inode could be found (not held, and the path names another
	// file or none in the agent's mount namespace).
	NoFile int
}

// ExitMaps adds to pid the executable mappings the kernel captured as it
// exited at time at (ms sorted by start; exe is the executable's path among
// them, "" when unknown), where they overlap none it has:
// the libraries its loader mapped after /proc/PID/maps was read at the
// exec, or all but the executable and the loader for a process gone before
// it could be read. A file mapping is kept only with a file that is the
// inode the kernel mapped: the handle the tracker holds for that device and
// inode, else the captured path opened and checked; never another file of
// the same name. A capture older than pid's exec belongs to an earlier
// process of the same pid and is ignored.
//
// The process is replaced, not changed in place: a *Process handed out
// earlier stays as it was.
func (t *Tracker) ExitMaps(pid uint32, at time.Time, exe string, ms []Mapping) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[pid]
	if !ok || at.Before(p.execAt) {
		return
	}
	np, added, missing := p.withMappings(ms, func(m *Mapping) (*os.File, bool) {
		if m.Anonymous() {
			return nil, true
		}
		f, ok := t.shared(fileKey{dev: m.Dev, inode: m.Inode}, m.Path)
		return f, ok
	})
	np.Exited = true
	// The kernel's list of its code mappings at exit, unless one was left
	// out for want of its file.
	np.Partial = missing > 0
	t.exitStats.NoFile += missing
	if np.Exe == "" && strings.HasPrefix(exe, "/") {
		np.Exe = exe // a process read too late to know it
	}
	if added > 0 {
		t.exitStats.Processes++
		t.exitStats.Mappings += added
	}
	t.procs[pid] = np
}

// withMappings returns a copy of p with the mappings of ms that overlap
// none of p's added, sorted, each with the file fileOf gives (nil: none);
// a mapping fileOf refuses is left out and counted in missing. p, its
// mappings and its files stay as they were.
func (p *Process) withMappings(ms []Mapping, fileOf func(*Mapping) (*os.File, bool)) (np *Process, added, missing int) {
	c := *p
	c.Mappings = slices.Clone(p.Mappings)
	c.Files = maps.Clone(p.Files)
	if c.Files == nil {
		c.Files = map[uint64]*os.File{}
	}
	for i := range ms {
		m := &ms[i]
		if overlaps(p.Mappings, *m) {
			continue
		}
		f, ok := fileOf(m)
		if !ok {
			missing++
			continue
		}
		if f != nil {
			c.Files[m.Start] = f
		}
		c.Mappings = append(c.Mappings, *m)
		added++
	}
	if added > 0 {
		SortMappings(c.Mappings)
	}
	return &c, added, missing
}

// SortMappings sorts ms by start, as Process.Find expects.
func SortMappings(ms []Mapping) {
	slices.SortFunc(ms, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
}

// overlaps reports whether m overlaps a mapping of ms.
func overlaps(ms []Mapping, m Mapping) bool {
	for i := range ms {
		if m.Start < ms[i].End && ms[i].Start < m.End {
			return true
		}
	}
	return false
}
