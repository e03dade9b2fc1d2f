package proc

import "log/slog"

// An image is one process's address space as the tracker knows it: what a
// first read, an exec or a fork that took a pid made. Each gets a
// generation of its own, unique in the tracker; the copies Refresh and
// ExitMaps make of it (more mappings found later) keep it. A consumer that
// keeps samples naming an image holds it (Hold) until they are
// symbolized (Release): an image replaced by an exec or a fork, or an
// exited process forgotten, stays readable while held, and is released
// with its last holder. It is the one way the tracker keeps a replaced
// image.

// held is what the tracker keeps of an image consumers hold.
type held struct {
	pid  uint32
	refs int
	// retired is the image's last copy once it left the table (replaced,
	// or its exited process forgotten); nil while it is the pid's entry.
	retired *Process
}

// Gen names p's image for Hold, Image and Release.
func (p *Process) Gen() uint32 { return p.gen }

// newGen numbers a new image. Callers hold t.mu.
func (t *Tracker) newGen() uint32 {
	t.gens++
	if t.gens == 0 {
		t.gens = 1 // 0 names no image
	}
	return t.gens
}

// Hold keeps p's image readable until Release, whatever becomes of the
// pid's entry. p must be the tracker's: its pid's entry, or an image held
// already. It reports false, holding nothing, for any other (an image
// that left the table unheld, whose files are closed).
func (t *Tracker) Hold(p *Process) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.held[p.gen]; ok {
		h.refs++
		return true
	}
	if cur, ok := t.procs[p.PID]; !ok || cur.gen != p.gen {
		return false
	}
	t.held[p.gen] = &held{pid: p.PID, refs: 1}
	return true
}

// Image returns the last copy of the image gen names, which a caller
// holds: the pid's entry (current true), which may have gained mappings
// since it was held, else the image as it left the table. Nil when gen is
// neither the entry nor held.
func (t *Tracker) Image(gen uint32) (p *Process, current bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[gen]
	if !ok {
		return nil, false
	}
	if h.retired != nil {
		return h.retired, false
	}
	if cur, ok := t.procs[h.pid]; ok && cur.gen == gen {
		return cur, true
	}
	return nil, false
}

// Release drops one hold of gen's image; the last releases an image that
// left the table, closing the files no other image maps.
func (t *Tracker) Release(gen uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.held[gen]
	if !ok {
		t.log.Warn("release of an image not held", slog.Uint64("gen", uint64(gen)))
		return
	}
	if h.refs--; h.refs > 0 {
		return
	}
	delete(t.held, gen)
	if h.retired != nil {
		t.release(h.retired)
	}
}

// Held returns the number of images held.
func (t *Tracker) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// retire takes p, an entry leaving the table, out of it: kept while held,
// else released. Callers hold t.mu.
func (t *Tracker) retire(p *Process) {
	if h, ok := t.held[p.gen]; ok {
		h.retired = p
		return
	}
	t.release(p)
}
