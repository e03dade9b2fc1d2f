package proc

import "time"

// Before returns the image process pid ran at time at, a moment inside an
// exec before the new image's registers were set (a sample flagged
// pre-exec, whose user registers and stack are still that image's). Such a
// sample comes before its exec in the stream (the thread reserved it
// before it reached the exec tracepoint), so the pid's entry is that
// image when it was read before at; else it is its parent's, whose address
// space a vfork or posix_spawn child runs in until its exec, and which a
// forked child copied. pid itself is not read: procfs shows its new image
// by now, or none. Nil when neither is known. The result is the tracker's:
// Hold it to keep it past a report.
//
// ip is the sample's user instruction pointer. A parent read before its
// loader mapped the libraries (at its first sample, in its own start)
// lacks the one a child's exec is called from, libc's execve: when ip
// lies in none of its mappings, they are read again, at most once per
// parentRefreshAge.
func (t *Tracker) Before(pid, parent uint32, at time.Time, ip uint64) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	// An entry read after at may hold the new image already. A fork's
	// copy of its parent lacking ip is the parent's image as the tracker
	// had it at the fork, maybe read before the parent's loader mapped
	// libc: the parent, read again below, has it.
	if p, ok := t.procs[pid]; ok && !p.Exited && p.readAt.Before(at) &&
		(p.forkOf == 0 || p.forkOf != parent || p.Find(ip) != nil) {
		return p
	}
	if parent == 0 || parent == pid {
		return nil
	}
	// The parent is read at first sight, like the process of any sample.
	p := t.get(parent)
	if p.Find(ip) == nil {
		p = t.refresh(parent, parentRefreshAge)
	}
	if p == nil || len(p.Mappings) == 0 {
		return nil
	}
	return p
}

// parentRefreshAge bounds how often Before re-reads a parent whose
// mappings lack a child's instruction pointer: a churning parent is read
// once more after its start, and an address no re-read finds costs one
// read of its maps per interval.
const parentRefreshAge = 100 * time.Millisecond
