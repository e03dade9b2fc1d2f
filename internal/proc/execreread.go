package proc

// ExecRead reports whether p's mappings are those read right at its exec
// (Exec) and not read since: the executable and the dynamic loader, and
// none of the libraries the loader maps after. On a kernel without the VMA
// iterator nothing captures them at exit, so they must be read while the
// process lives.
func (p *Process) ExecRead() bool {
	return p != nil && !p.execAt.IsZero() && !p.execReread && !p.Exited && !p.Partial
}

// RereadAfterExec re-reads the mappings of p, the tracker's entry for its
// pid read at its exec, once, whatever its age: the caller found an
// address of a sample in none of them, which the libraries mapped since the
// exec explain. Later misses wait for Refresh's minimum age. It returns
// the entry, p itself when p is no longer the entry or was re-read already.
func (t *Tracker) RereadAfterExec(p *Process) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !p.ExecRead() || t.procs[p.PID] != p {
		return p
	}
	np := t.refresh(p.PID, 0)
	if np != p {
		// A new copy, not yet handed out: marking it races with no
		// reader.
		np.execReread = true
	}
	return np
}

// AwaitsExit reports whether p, an image made by an exec, is gone without
// its libraries known: placed from the exec (Partial), or found gone when
// it was to be read again. Its exit event, which follows in the stream,
// brings the kernel's capture of its mappings (ExitMaps) where the kernel
// has the VMA iterator; until Exit is handled nothing else can.
func (p *Process) AwaitsExit() bool {
	return p != nil && !p.execAt.IsZero() && p.exitedAt.IsZero() && (p.Partial || p.Exited)
}
